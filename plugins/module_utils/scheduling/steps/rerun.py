"""A rerun of a create that finds its session whole (docs/sessions.md, "Reruns and
idempotency"), decided on the controller from the agents' reads: no second ledger
transaction.

The ledger's first answer to a create of a session it holds, confirmed, asks to read the
session's agents and carries its entry (``rerun``). When those reads show every container
of that very session there and running, nothing is to be placed, reserved or made, and
:func:`rerun_plan` gives the plan the ledger's second answer would have given (the same
code: plan.plan_session on the containers, then SessionPlan's answering, with_deadline
and with_attempt).
Anything else - a read missing, a container stopped or gone, another session or ledger
on those agents - gives None, and the create asks the ledger again, which decides (and
refuses) as before.

    rerun_plan(spec, reads, answer)   the plan, or None
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    SessionConflict,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_LEDGER,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
    spec_hash,
)


def rerun_plan(
    spec_raw: Mapping[str, Any], reads: Sequence[Mapping[str, Any]], answer: Mapping[str, Any]
) -> Optional[dict[str, Any]]:
    """The plan of a rerun whose session the reads show whole and running (the filter
    bai_rerun_plan): ``spec_raw`` the request's spec, ``reads`` the registered
    bai_agent_info results of the agents ``answer`` (the ledger's first answer, with
    ``rerun``, ``need_read`` and ``ledger_ids``) asked for. None when the ledger must
    decide."""
    raw = answer.get("rerun")
    if not raw:
        return None
    entry = Reservation.from_dict(raw)
    asked = set(answer.get("need_read") or ())
    good = [
        r
        for r in reads
        if "agent" in r
        and str(r["agent"].get("name")) in asked
        and not (r.get("failed") or r.get("unreachable"))
    ]
    if not asked or {str(r["agent"].get("name")) for r in good} != asked or len(good) != len(asked):
        return None
    try:
        spec = normalize_spec(dict(spec_raw))
    except SpecError:
        return None
    if spec_hash(spec) != entry.spec_hash:
        return None
    ids = answer.get("ledger_ids") or ()
    shown = [AgentRead.of(r) for r in good]
    existing = [row for read in shown for row in read.containers]
    if not _whole(existing, entry, ids) or _foreign(shown, ids):
        return None
    try:
        plan = plan_session(spec, [], existing)
    except (SessionConflict, SpecError):
        return None
    if not plan.ready or plan.session_id != entry.session_id:
        return None
    # What the ledger holds of it: a rerun with another lifetime finds the session as it is.
    spec = replace(
        spec,
        lifetime_s=spec.lifetime_s or int(entry.lifetime_s or 0),
        end_signal=spec.end_signal or str(entry.end_signal or ""),
    )
    plan = plan.answering(spec, read=sorted(asked), kept=[], unavailable=[])
    plan = plan.with_deadline(entry.deadline).with_attempt(entry.attempt)
    return {
        **plan.to_dict(),
        "changed": False,
        "reservation": entry.to_dict(),
        "dropped": [],
        "adopted": [],
        "save": False,
        "ledger_ids": list(answer.get("ledger_ids") or ()),
        "ledger_time": answer.get("ledger_time"),
        "rerun": True,
    }


def _whole(existing: Sequence[ContainerRow], entry: Reservation, ids: Sequence[str]) -> bool:
    """Every container of the entry's session there and running, none of another
    instance of it, none counted by another ledger."""
    if len(existing) != len(entry.kernels or ()):
        return False
    for row in existing:
        if row.label(LABEL_SESSION_ID) != entry.session_id or row.state != "running":
            return False
        ledger = row.label(LABEL_LEDGER)
        if ledger and ledger not in ids:
            return False
    return True


def _foreign(reads: Sequence[AgentRead], ids: Sequence[str]) -> bool:
    """Another ledger's session on these agents: the ledger refuses (refusals.py)."""
    return any(
        row.get("ledger") and row["ledger"] not in ids
        for read in reads
        for row in (read.sessions or {}).values()
    )
