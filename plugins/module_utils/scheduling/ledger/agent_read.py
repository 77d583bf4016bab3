"""An agent's fresh read, as the ledger's steps use it (:class:`AgentRead`).

A bai_agent_info result reaches the ledger module as JSON (its ``agent_info`` option).
A create makes one :class:`AgentRead` of each result it was given, on the ledger's clock
(:func:`kept_reads.this_run`); reconcile takes those this run read itself
(:func:`kept_reads.fresh_reads`, by agent). Expiry, reconcile, fencing, the refusals and
the kept reads read its fields, never the result's keys; placement still takes the
result (``result``: its capacity and use, as usage.adjust counts them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError


@dataclass(frozen=True)
class AgentRead:
    """What one read of an agent showed: its name and identity, when (the ledger's clock;
    0 when unknown: it proves nothing gone), the sessions it runs (session id -> what its
    containers use, usage.observed_sessions; None when the read did not say), its session
    containers (Docker list entries with ``labels``, ``state``, ``status``) and the whole
    result (``result``: what placement reads of its capacity)."""

    name: str
    identity: str
    read_at: float
    agent: Mapping[str, Any]  # capacity, use, group, its own availability record
    sessions: Mapping[str, dict[str, Any]] | None
    containers: Sequence[Mapping[str, Any]]
    images: Mapping[str, Any]  # image -> {present}
    paths: Mapping[str, Any]  # mount source -> what the agent knows of it
    kept: bool  # a kept read handed back (never this run's own)
    result: Mapping[str, Any]

    @classmethod
    def of(cls, result: Mapping[str, Any]) -> AgentRead:
        """The read of a bai_agent_info result; SpecError when it has no ``agent``."""
        if "agent" not in result:
            raise SpecError(
                "agent_info: an item has no 'agent' key; pass the registered results of "
                "a bai_agent_info task (register: info -> agent_info: info.results)"
            )
        agent = result["agent"]
        return cls(
            name=str(agent.get("name")),
            identity=str(agent.get("id") or ""),
            read_at=float(result.get("read_at") or 0),
            agent=agent,
            sessions=result.get("sessions") if "sessions" in result else None,
            containers=tuple(result.get("containers") or ()),
            images=result.get("images") or {},
            paths=result.get("paths") or {},
            kept=bool(result.get("kept")),
            result=result,
        )

    def session(self, session_id: str) -> Mapping[str, Any]:
        """What the read shows of session ``session_id`` ({} when nothing)."""
        return (self.sessions or {}).get(session_id) or {}
