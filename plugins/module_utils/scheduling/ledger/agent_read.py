"""An agent's fresh read, as the ledger's steps use it (:class:`AgentRead`).

A bai_agent_info result reaches the ledger module as JSON (its ``agent_info`` option).
A create makes one :class:`AgentRead` of each result it was given, on the ledger's clock
(:func:`kept_reads.this_run`); reconcile takes those this run read itself
(:func:`kept_reads.fresh_reads`, by agent). A kept read and a hint
(:func:`kept_reads.kept_result`, :func:`kept_reads.hint`) are AgentReads too, marked
``kept``. Expiry, reconcile, fencing, the refusals, the kept reads, usage.adjust and
placement (steps/plan.py: agents_from_reads) read its fields, never a result's keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_state import (
    AgentState,
)


@dataclass(slots=True)
class AgentRead:
    """What one read of an agent showed: its name and identity, when (the ledger's clock;
    0 when unknown: it proves nothing gone), the sessions it runs (session id -> what its
    containers use, usage.observed_sessions; None when the read did not say), its session
    containers (:class:`ContainerRow`), what it knows
    of images and mount sources, and whether it is a kept read (from the ledger, not this
    run's: every session of the ledger counts on it by its reservation) or a hint (its
    capacity alone)."""

    name: str
    identity: str
    read_at: float
    agent: AgentState  # capacity, use, group, its own availability record
    sessions: Mapping[str, dict[str, Any]] | None
    containers: Sequence[ContainerRow]
    images: Mapping[str, Any]  # image -> {present}
    paths: Mapping[str, Any]  # mount source -> what the agent knows of it
    kept: bool = False  # a kept read handed back (never this run's own)
    hint: bool = False  # a hint: declared capacity, no read

    @classmethod
    def of(cls, result: Mapping[str, Any], read_at: float | None = None) -> AgentRead:
        """The read of a bai_agent_info result (timed ``read_at`` where given: the
        ledger's clock, kept_reads.this_run); SpecError when it has no ``agent``."""
        if "agent" not in result:
            raise SpecError(
                "agent_info: an item has no 'agent' key; pass the registered results of "
                "a bai_agent_info task (register: info -> agent_info: info.results)"
            )
        agent = AgentState.from_dict(result["agent"])
        get = result.get
        return cls(
            str(agent.name),
            str(agent.id or ""),
            float(get("read_at") or 0) if read_at is None else read_at,
            agent,
            get("sessions"),
            tuple(ContainerRow.of(row) for row in get("containers") or ()),
            get("images") or {},
            get("paths") or {},
            bool(get("kept")),
            bool(get("hint")),
        )

    def with_agent(self, agent: AgentState) -> AgentRead:
        """The same read with ``agent`` (its use counted again: usage.adjust)."""
        return AgentRead(
            self.name,
            self.identity,
            self.read_at,
            agent,
            self.sessions,
            self.containers,
            self.images,
            self.paths,
            self.kept,
            self.hint,
        )

    def session(self, session_id: str) -> Mapping[str, Any]:
        """What the read shows of session ``session_id`` ({} when nothing)."""
        return (self.sessions or {}).get(session_id) or {}
