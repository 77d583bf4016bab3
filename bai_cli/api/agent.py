"""Agents: list and show them as the cluster sees them, pause, drain or activate one,
and take one out of the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_view
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.availability import (
    AVAILABILITIES,
    describe_json,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import check_number

from ..errors import BaiClusterError
from .base import Event, current_user, flag, run, set_var
from .ledger import NO_PASS, Scheduled, schedule_sessions

AGENT_LIST = "playbooks/agent_list.yml"
AGENT_CHECK = "playbooks/agent_check.yml"
AGENT_AVAILABILITY = "playbooks/agent_availability.yml"
AGENT_DRAIN = "playbooks/agent_drain.yml"
AGENT_REMOVE = "playbooks/agent_remove.yml"
# How long a drain waits for the agent's sessions to end (agent_drain.yml's default).
DRAIN_TIMEOUT_S = 600


@dataclass
class AgentAvailability:
    """What ``agent pause``, ``drain`` or ``activate`` recorded (agent_availability.yml's
    ``bai_agent_availability``): the cluster's ``record`` (None when active), whether the
    agent itself was told (``told_agent``; False: it did not answer, the cluster alone
    holds it out of service), its swarm ``node`` and the ``sessions`` on it (each with
    ``name``, ``session_id``, ``containers``, ``states``)."""

    name: str
    id: str
    availability: str
    record: dict[str, Any] | None = None
    told_agent: bool = True
    node: dict[str, Any] | None = None
    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        """'paused by alice at 2026-11-26 09:00:00 UTC: driver upgrade', or 'active'."""
        return describe_json(self.record)

    @property
    def session_names(self) -> list[str]:
        return sorted({str(s.get("name")) for s in self.sessions})

    @classmethod
    def from_stats(cls, data: Mapping[str, Any]) -> AgentAvailability:
        return cls(
            name=str(data.get("name")),
            id=str(data.get("id") or ""),
            availability=str(data.get("availability")),
            record=dict(data["record"]) if data.get("record") else None,
            told_agent=flag(data.get("told_agent", True)),
            node=dict(data["node"]) if data.get("node") else None,
            sessions=[dict(s) for s in data.get("sessions") or []],
        )


@dataclass
class AgentHealth:
    """What ``agent check`` found (agent_check.yml's ``bai_agent_check``): whether the
    agent ``answered`` (else ``problem`` says how it failed), whether it is ``healthy``,
    and each check (``check``, ``status`` ok/FAILED/skip, ``detail``), in order."""

    name: str
    answered: bool
    healthy: bool
    checks: list[dict[str, Any]] = field(default_factory=list)
    problem: str = ""

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if c.get("status") == "FAILED"]


def check_agent(
    name: str, *, inventory: str | None = None, on_event: Event | None = None, **kwargs: Any
) -> AgentHealth:
    """Run agent ``name``'s health checks now (playbooks/agent_check.yml, which changes
    nothing): an unhealthy agent or one that does not answer is a result, not an error."""
    extravars = {"agent_name": name, "agent_check_fail": False}
    result = run(AGENT_CHECK, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = dict(result.stats.get("bai_agent_check") or {})
    return AgentHealth(
        name=name,
        answered=flag(data.get("answered")),
        healthy=flag(data.get("healthy")),
        checks=[dict(c) for c in data.get("checks") or []],
        problem=str(data.get("problem") or ""),
    )


@dataclass
class Drained:
    """What ``agent drain`` ended with: the sessions ``left`` on the agent when the wait
    ended and, when ``forced``, what destroying them removed (``destroyed``:
    session_destroy.yml's rows, with ``name``, ``containers``, ``networks``...). The agent
    stays drained either way (``availability``)."""

    name: str
    left: list[str] = field(default_factory=list)
    forced: bool = False
    destroyed: list[dict[str, Any]] = field(default_factory=list)
    availability: AgentAvailability | None = None
    # Forced: the batch sessions whose gang starts again (session_restarts): name ->
    # attempt, reason; and the scheduler pass that then started what fits elsewhere.
    restarted: dict[str, Any] = field(default_factory=dict)
    schedule: Scheduled | None = None


@dataclass
class Removed:
    """What ``agent remove`` did (agent_remove.yml's ``bai_agent_removed``): the swarm
    ``node`` it removed (None: none was left), what the session ledger ``dropped``, the
    sessions it ended (``sessions_ended``: destroyed by a forced drain, or, for an agent
    that was ``dead``, on the agents that answer) and what destroying them removed
    (``destroyed``: session_destroy.yml's rows)."""

    name: str
    dead: bool = False
    node: dict[str, Any] | None = None
    dropped: list[str] = field(default_factory=list)
    sessions_ended: list[str] = field(default_factory=list)
    destroyed: list[dict[str, Any]] = field(default_factory=list)


def list_agents(
    name: str | None = None,
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The inventory's agents (or agent ``name`` alone) as the cluster sees them, and the
    totals (playbooks/agent_list.yml). Each row: name, id, group, availability
    (active, pause, drain), availability_text, by, reason, since, health, node_state,
    offer and given_out (cpu, mem, gpu_devices), gpu_free, sessions, source (engine, or
    ledger for an agent that does not answer), in_service. Totals: agents, in_service,
    offered, given_out, free (of the agents in service only)."""
    extravars = {"agent_name": name} if name else {}
    result = run(AGENT_LIST, extravars, inventory=inventory, on_event=on_event, **kwargs)
    rows = [dict(row) for row in result.stats.get("bai_agents") or []]
    totals = dict(result.stats.get("bai_agent_totals") or agent_view.totals(rows))
    return rows, totals


def show_agent(
    name: str, *, inventory: str | None = None, on_event: Event | None = None, **kwargs: Any
) -> dict[str, Any]:
    """One agent's row (see :func:`list_agents`)."""
    rows, _totals = list_agents(name, inventory=inventory, on_event=on_event, **kwargs)
    for row in rows:
        if row.get("name") == name:
            return row
    raise BaiClusterError("not_found", f"no agent {name} in this inventory")


def set_agent_availability(
    name: str,
    availability: str,
    *,
    reason: str | None = None,
    by: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> AgentAvailability:
    """Pause (``pause``), drain (``drain``, without waiting: see :func:`drain_agent`) or
    activate (``active``) an agent (playbooks/agent_availability.yml). Paused or drained:
    no new session is placed on it or admitted by it; its sessions keep running and a
    rerun still repairs them. ``by`` defaults to the user running this. Idempotent:
    pausing a paused agent keeps the first record's who and when."""
    if availability not in AVAILABILITIES:
        raise BaiClusterError(
            "bad_input",
            f"availability must be one of {', '.join(AVAILABILITIES)}, got {availability!r}",
        )
    extravars: dict[str, Any] = {"agent_name": name, "agent_availability": availability}
    set_var(extravars, "agent_reason", reason)
    set_var(extravars, "agent_by", by or current_user())
    result = run(AGENT_AVAILABILITY, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = result.stats.get("bai_agent_availability")
    if not data:
        raise BaiClusterError("failed", "agent_availability.yml recorded no outcome")
    return AgentAvailability.from_stats(data)


def _drain_vars(
    name: str, timeout_s: int, force: bool, reason: str | None, by: str | None
) -> dict[str, Any]:
    """agent_drain.yml's variables (agent_remove.yml drains with the same), checked."""
    try:
        timeout_s = int(check_number("agent_drain_timeout_s", timeout_s))
    except SpecError as exc:
        raise BaiClusterError("bad_input", f"the drain timeout: {exc}") from None
    extravars: dict[str, Any] = {
        "agent_name": name,
        "agent_drain_timeout_s": timeout_s,
        "agent_drain_force": bool(force),
        **NO_PASS,
    }
    set_var(extravars, "agent_reason", reason)
    set_var(extravars, "agent_by", by or current_user())
    return extravars


def drain_agent(
    name: str,
    *,
    timeout_s: int = DRAIN_TIMEOUT_S,
    force: bool = False,
    reason: str | None = None,
    by: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Drained:
    """Drain an agent (playbooks/agent_drain.yml): mark it drained (no new sessions), then
    wait up to ``timeout_s`` seconds for its sessions to end. Sessions left after that
    raise :class:`BaiClusterError` naming them (the agent stays drained), unless
    ``force``: then they are destroyed. The agent is never activated here (see
    :func:`set_agent_availability`)."""
    extravars = _drain_vars(name, timeout_s, force, reason, by)
    result = run(AGENT_DRAIN, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = result.stats.get("bai_agent_drain")
    if not data:
        raise BaiClusterError("failed", "agent_drain.yml recorded no outcome")
    marked = result.stats.get("bai_agent_availability")
    forced = flag(data.get("forced"))
    # Batch sessions the drain stopped whose gang starts again (session_restarts) wait at
    # the head of the queue: a scheduler pass starts them elsewhere now, as after a destroy.
    restarted = dict(result.stats.get("bai_sessions_restarted") or {}) if forced else {}
    schedule = None
    if int(result.stats.get("bai_queue_waiting") or 0) > 0 and restarted:
        schedule = schedule_sessions(inventory=inventory, on_event=on_event, **kwargs)
    return Drained(
        name=str(data.get("name") or name),
        left=[str(s) for s in data.get("left") or []],
        forced=forced,
        destroyed=[dict(r) for r in result.stats.get("bai_sessions_destroyed") or []]
        if forced
        else [],
        availability=AgentAvailability.from_stats(marked) if marked else None,
        restarted=restarted,
        schedule=schedule,
    )


def remove_agent(
    name: str,
    *,
    timeout_s: int = DRAIN_TIMEOUT_S,
    force: bool = False,
    dead: bool = False,
    reason: str | None = None,
    by: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Removed:
    """Take an agent out of the cluster (playbooks/agent_remove.yml). An agent that
    answers is drained first as :func:`drain_agent` does (``timeout_s``, ``force``):
    sessions left stop the removal with :class:`BaiClusterError`, the agent stays
    drained. Then it leaves the swarm, its node entry goes, the session ledger forgets it
    and the other hosts' firewalls drop its addresses. ``dead``: an agent that is powered
    off or does not answer - nothing contacts it, its sessions are destroyed on the
    agents that answer, its node is removed with force. Idempotent."""
    extravars = {**_drain_vars(name, timeout_s, force, reason, by), "agent_remove_dead": bool(dead)}
    result = run(AGENT_REMOVE, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = result.stats.get("bai_agent_removed")
    if not data:
        raise BaiClusterError("failed", "agent_remove.yml recorded no outcome")
    ended = [str(s) for s in data.get("sessions_ended") or []]
    return Removed(
        name=str(data.get("name") or name),
        dead=flag(data.get("dead")),
        node=dict(data["node"]) if data.get("node") else None,
        dropped=[str(d) for d in data.get("dropped") or []],
        sessions_ended=ended,
        destroyed=[dict(r) for r in result.stats.get("bai_sessions_destroyed") or []]
        if ended
        else [],
    )
