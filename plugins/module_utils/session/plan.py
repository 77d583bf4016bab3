"""A create's plan (:class:`SessionPlan`): what placing a session decides, what the
ledger's answer adds to it, and the one form both take as a module's result.

scheduling/steps/plan.py's ``plan_session`` makes it; a create's answer (reserve.py) and
a rerun that finds its session whole (rerun.py) decorate it with the request it answers
(:meth:`answering`), the session's deadline and its attempt (:meth:`with_deadline`,
:meth:`with_attempt`, which label every container too); ``reservations.reservation``
reads it; ``to_dict`` is bai_session_ledger's (and the Python API's) result, key for key
as the modules document it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_DEADLINE,
    LABEL_RESTART_COUNT,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    PlannedKernel,
    SessionSpec,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    spec_canonical,
    spec_hash,
)

CREATE = "create"
EXISTS = "exists"


@dataclass(frozen=True, slots=True)
class NetworkPlan:
    """The session network (docs/networks.md): its name, ``bridge`` or ``overlay``, and
    its labels."""

    name: str
    driver: str
    labels: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "driver": self.driver, "labels": dict(self.labels)}


@dataclass(frozen=True, slots=True)
class Answered:
    """What a create's answer says of how its agents were known: those read this run
    (None when the playbook gave none), the kept reads it used, and the agents out of
    service."""

    read: Sequence[str] | None
    kept: Any
    unavailable: Sequence[str]


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """``action`` ``create`` (fresh ids and a placement) or ``exists`` (the session is
    already there with this very spec: ids and placement read back from its labels);
    ``ready`` (exists and every container runs); ``ssh_port`` (an existing master's
    published sshd); the mode as placed; the network; the agents in order of first use
    (the master's first); the kernels; and the request (``spec``) it answers."""

    action: str
    ready: bool
    ssh_port: int | None
    session_id: str
    mode: str
    spec: SessionSpec
    spec_hash: str
    network: NetworkPlan
    agents: tuple[str, ...]
    kernels: tuple[PlannedKernel, ...]
    answered: Answered | None = None
    deadline: float | None = None
    attempt: int | None = None

    @property
    def exists(self) -> bool:
        """The session was made before this plan (the ledger takes it in as it is)."""
        return self.action == EXISTS

    def answering(
        self,
        spec: SessionSpec,
        *,
        read: Sequence[str] | None,
        kept: Any,
        unavailable: Sequence[str],
    ) -> SessionPlan:
        """The plan as a create's answer gives it: with the request it answers (a rerun's
        ``spec`` may carry the ledger's lifetime) and how its agents were known."""
        return replace(
            self,
            spec=spec,
            spec_hash=spec_hash(spec),
            answered=Answered(read, kept, unavailable),
        )

    def with_deadline(self, deadline: float | None) -> SessionPlan:
        """The plan with its session's deadline (the ledger's, a rerun's too) on every
        container's labels, whence the containers' BACKENDAI_SESSION_DEADLINE."""
        if deadline is None:
            return self
        return replace(
            self, kernels=_labelled(self.kernels, LABEL_DEADLINE, str(deadline)), deadline=deadline
        )

    def with_attempt(self, attempt: int | None) -> SessionPlan:
        """The plan with how many times a restartable batch session's gang started again
        (None for a session that does not restart) on every container's labels, whence
        BACKENDAI_SESSION_RESTART_COUNT."""
        if attempt is None:
            return self
        count = int(attempt)
        return replace(
            self, kernels=_labelled(self.kernels, LABEL_RESTART_COUNT, str(count)), attempt=count
        )

    def summary(self) -> dict[str, Any]:
        """The plan's ``summary``: the session and where each of its containers runs."""
        return {
            "name": self.spec.name,
            "session_id": self.session_id,
            "mode": self.mode,
            "network": self.network.name,
            "network_driver": self.network.driver,
            "containers": [
                {
                    "host": k.hostname,
                    "role": k.role,
                    "idx": k.idx,
                    "agent": k.agent,
                    "kernel_id": k.kernel_id,
                    "container": k.container_name,
                }
                for k in self.kernels
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        """The module's result (bai_session_ledger's RETURN documents each key)."""
        out: dict[str, Any] = {
            "action": self.action,
            # Nothing to do: the session exists and every container runs.
            "ready": self.ready,
            "ssh_port": self.ssh_port,
            "session_id": self.session_id,
            "mode": self.mode,
            "requested_mode": self.spec.mode,
            "spec_hash": self.spec_hash,
            "network": self.network.to_dict(),
            "agents": list(self.agents),
            "kernels": [k.to_dict() for k in self.kernels],
            "summary": self.summary(),
        }
        if self.answered is not None:
            out["spec"] = spec_canonical(self.spec)
            out["size"] = self.spec.size
            out["read"] = None if self.answered.read is None else list(self.answered.read)
            out["kept"] = self.answered.kept
            out["unavailable"] = list(self.answered.unavailable)
        if self.deadline is not None:
            out["deadline"] = self.deadline
        if self.attempt is not None:
            out["attempt"] = self.attempt
        return out


def _labelled(kernels: Sequence[PlannedKernel], key: str, value: str) -> tuple[PlannedKernel, ...]:
    return tuple(replace(k, labels={**k.labels, key: value}) for k in kernels)
