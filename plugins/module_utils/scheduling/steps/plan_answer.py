"""A create's answer as the ledger gives it (reserve.py) and as a rerun that finds its
session whole takes it from the agents' reads (rerun.py): one form for both.

    decorated(plan, spec, ...)       the plan with the request it answers
    with_deadline(plan, deadline)    the session's deadline on every container's labels
    with_attempt(plan, attempt)      a restartable session's attempt, likewise
"""

from __future__ import annotations

from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_DEADLINE,
    LABEL_RESTART_COUNT,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import SessionSpec
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    spec_canonical,
    spec_hash,
)


def with_deadline(plan: dict[str, Any], deadline: Any) -> dict[str, Any]:
    """The plan with its session's deadline (the ledger's, a rerun's too) on every
    container's labels, whence the containers' BACKENDAI_SESSION_DEADLINE."""
    if deadline is None:
        return plan
    kernels = [
        {**k, "labels": {**k["labels"], LABEL_DEADLINE: str(deadline)}} for k in plan["kernels"]
    ]
    return {**plan, "kernels": kernels, "deadline": deadline}


def with_attempt(plan: dict[str, Any], attempt: Any) -> dict[str, Any]:
    """The plan with how many times a restartable batch session's gang started again
    (the ledger entry's ``attempt``; None for a session that does not restart) on every
    container's labels, whence BACKENDAI_SESSION_RESTART_COUNT."""
    if attempt is None:
        return plan
    kernels = [
        {**k, "labels": {**k["labels"], LABEL_RESTART_COUNT: str(int(attempt))}}
        for k in plan["kernels"]
    ]
    return {**plan, "kernels": kernels, "attempt": int(attempt)}


def decorated(
    plan: dict[str, Any],
    spec: SessionSpec,
    *,
    read: list[str] | None,
    kept: Any,
    unavailable: list[str],
) -> dict[str, Any]:
    """The plan as a create's answer gives it: with the request it answers (a rerun's too,
    rerun.py) and how its agents were known."""
    return {
        **plan,
        "requested_mode": spec.mode,
        "spec": spec_canonical(spec),
        "spec_hash": spec_hash(spec),
        "size": spec.size,
        "read": read,
        "kept": kept,
        "unavailable": unavailable,
    }
