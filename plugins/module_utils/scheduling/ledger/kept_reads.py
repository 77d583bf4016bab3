"""The agents' kept reads: what the ledger remembers of each agent (its agents map).

The ledger keeps each agent's last read (capacity, GPU devices, the sessions it showed,
which images and mount sources it has), so that a create need not read every agent:
placement uses a kept read where it is recent enough (``read_max_age``) and knows the
request's images and paths, places by a hint (:func:`hint`: declared capacity, the
ledger's sessions as load) elsewhere, and reads afresh only the agents it must and those
it placed on by a hint (:func:`sources`). A kept read is trusted only to say yes: every
session of the ledger counts on it by its reservation, whatever its state (usage.py),
and a placement that finds no room with kept reads asks for fresh ones before it says
PENDING. A removed session leaves the kept reads (:func:`forget_session`).

A fresh read is timed by the ledger's clock (:func:`this_run`), never an agent's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import availability
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_state import (
    AgentState,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    agent_capacity,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    CREATING,
    KeptRead,
    Ledger,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.roster import (
    Declared,
    SwarmNode,
    node_of,
)


def overdue_agents(ledger: Ledger, now: float) -> list[str]:
    """The agents of ``creating`` reservations past their expiry that have no kept read
    taken since (so :func:`expire` can settle them once they are read)."""
    records = ledger.agents or {}
    out: set[str] = set()
    for entry in ledger.sessions.values():
        expires = float(entry.expires_at or 0)
        if entry.state != CREATING or expires > now:
            continue
        for kernel in entry.kernels:
            record = records.get(kernel.agent)
            if float(record.stored_at if record else 0) < expires:
                out.add(kernel.agent)
    return sorted(out)


def this_run(
    results: Sequence[Mapping[str, Any]], *, answered_only: bool = False
) -> list[AgentRead]:
    """The reads this run was given (bai_agent_info results; skipped ones left out), each
    timed by the ledger's clock: its ``read_after``, the ledger's time when this run asked
    for the read (so no later than the read itself), never the agent's own ``read_at``,
    which another host's clock gave. A read without it counts as one of unknown age (0):
    it never proves a session gone, nor settled. A result without an agent is a SpecError
    (a create's), or, ``answered_only`` (a reconcile's), left out with those that failed."""
    out = []
    for result in results:
        if result.get("skipped"):
            continue
        if answered_only and (result.get("failed") or "agent" not in result):
            continue
        out.append(AgentRead.of(result, read_at=float(result.get("read_after") or 0)))
    return out


def fresh_reads(reads: Sequence[AgentRead]) -> dict[str, AgentRead]:
    """This run's own reads of the agents (not the kept ones it was handed), by name."""
    return {read.name: read for read in reads if not read.kept}


def remember(
    ledger: Ledger,
    reads: Sequence[AgentRead],
    now: float,
    declared: Mapping[str, Declared] | None = None,
) -> None:
    """Keep each fresh read as the agent's record, stamped ``stored_at`` by the ledger
    host's clock, with what the inventory declared for it (``declared``: by agent name; a
    record whose declaration changed is read again). What an older record
    knew of images and paths this read did not ask about is kept."""
    if ledger.agents is None:
        ledger.agents = {}
    agents = ledger.agents
    for read in reads:
        if read.kept:
            continue
        old = agents.get(read.name)
        images = {
            **(old.images if old else {}),
            **{
                ref: {"present": bool((found or {}).get("present"))}
                for ref, found in read.images.items()
            },
        }
        agents[read.name] = KeptRead(
            stored_at=now,
            read_at=read.read_at or now,
            agent=read.agent.copy(),
            sessions=dict(read.sessions or {}),
            images=images,
            paths={**(old.paths if old else {}), **dict(read.paths)},
            declared=_record_of((declared or {}).get(read.name)),
        )


def _record_of(declared: Declared | None) -> dict[str, Any] | None:
    return declared.record() if declared is not None else None


def forget_session(ledger: Ledger, session_id: str) -> None:
    """Take a removed session out of the kept reads (what it used is free again)."""
    for record in (ledger.agents or {}).values():
        forget_in_record(record, session_id)


def forget_in_record(record: KeptRead, session_id: str) -> None:
    """Take a removed session out of one agent's kept read."""
    row = record.sessions.pop(session_id, None)
    if row is None:
        return
    agent = record.agent
    agent.used_cpu = round(max(float(agent.used_cpu or 0) - float(row.get("cpu") or 0), 0.0), 6)
    agent.used_mem = round(max(float(agent.used_mem or 0) - float(row.get("mem") or 0), 0.0))
    agent.used_gpu = round(max(float(agent.used_gpu or 0) - float(row.get("gpu") or 0), 0.0))
    freed = set(row.get("gpu_devices") or ())
    agent.gpu_in_use = sorted(set(agent.gpu_in_use or ()) - freed)


def kept_result(record: KeptRead) -> AgentRead:
    """A kept record as a read, marked ``kept``. It shows no containers: agents that may
    hold the session are always read afresh."""
    return AgentRead(
        name=str(record.agent.name),
        identity=record.identity,
        read_at=float(record.read_at or 0),
        agent=record.agent.copy(),
        sessions=dict(record.sessions or {}),
        containers=(),
        images=dict(record.images or {}),
        paths=dict(record.paths or {}),
        kept=True,
    )


def holders(ledger: Ledger, name: str) -> set[str]:
    """Agents that may hold session ``name``: those of its reservation and those whose
    kept read showed a session of that name - but for what an earlier attempt of a batch
    session that restarted left on an agent (its session id, off its current attempt's
    agents: scheduling/steps/fencing.py), which reconcile removes and nothing takes in."""
    entry = ledger.sessions.get(name)
    found = {k.agent for k in entry.kernels} if entry else set()
    queued = (ledger.queue or {}).get(name)
    restarted = entry.session_id if entry and entry.attempt else None
    if queued and queued.attempt and queued.session_id:
        restarted = queued.session_id
    for agent, record in (ledger.agents or {}).items():
        if any(
            row.get("name") == name and (sid != restarted or agent in found)
            for sid, row in (record.sessions or {}).items()
        ):
            found.add(agent)
    return found


class Sources(NamedTuple):
    """Where a create gets each agent's state from (:func:`sources`)."""

    read: list[str]  # to read before placing: nothing else says enough of them
    kept: list[str]  # recent kept reads: a placement on them is made as it is
    hinted: dict[str, AgentRead]  # agent -> hint: a placement on it reads it first
    unavailable: dict[str, str]  # agent -> why it takes no new session (paused, down)


def sources(
    ledger: Ledger,
    agents: Sequence[Declared],
    *,
    name: str,
    images: Sequence[str],
    paths: Sequence[str],
    fresh: set[str],
    now: float,
    max_age: float,
    nodes: Mapping[str, SwarmNode] | None = None,
    hints: bool = True,
    away: Mapping[str, str] | None = None,
) -> Sources:
    """How a create knows each agent of the inventory (``agents``) that this run did not
    read (``fresh``), so that it reads only the agents
    it must, whatever the size of the cluster.

    Read first: every agent that may hold the session (its containers decide what a rerun
    does) or a reservation past its expiry (:func:`overdue_agents`), and an agent nothing
    else describes. Kept: a kept read younger than ``max_age`` seconds, taken under the
    same declaration, that knows the request's images and paths. Hinted (:func:`hint`):
    any other agent whose capacity is known - from its declaration
    (``bai_agent_resources`` with ``gpu: 0``), an earlier read under the same declaration,
    or the swarm's node list (``nodes``, :func:`node_table`) - with the ledger's own
    sessions as its load; a placement that uses it reads it first, and places again with
    that read. An agent that is paused or drained (the ledger's availability records, or
    its swarm node's availability) or that the node list shows down is not placed on
    (``unavailable``, with why), unless it may hold the session (a rerun repairs it).
    Without ``hints`` (a ledger that is missing: what the agents run must be seen) every
    agent without a recent kept read is read. ``away``: agents this run could not read,
    with why; they are passed over like a paused one (the caller fails a create whose
    session one of them may hold), and a reservation past its expiry on one of them stays
    counted until it answers.
    """
    records = ledger.agents or {}
    away = away or {}
    holding = holders(ledger, name) | {a for a in overdue_agents(ledger, now) if a not in away}
    out = Sources([], [], {}, {})
    paused = availability.records(ledger)
    for declared in agents:
        agent = declared.name
        record = records.get(agent)
        identity = record.identity if record else ""
        node = node_of(nodes, agent, identity)
        why = away.get(agent) or availability.unavailable(agent, identity, paused, node)
        if why and agent not in holding:
            out.unavailable[agent] = why
            continue
        if agent in fresh:
            continue
        if agent in holding:
            out.read.append(agent)
            continue
        same = record is not None and record.declared == declared.record()
        if (
            same
            and record is not None
            and now - float(record.stored_at or 0) <= max_age
            and all(ref in (record.images or {}) for ref in images)
            and all(path in (record.paths or {}) for path in paths)
        ):
            out.kept.append(agent)
            continue
        found = hint(declared, record if same else None, node) if hints else None
        if found is None:
            out.read.append(agent)
        else:
            out.hinted[agent] = found
    return out


def hint(
    declared: Declared,
    record: KeptRead | None = None,
    node: SwarmNode | None = None,
) -> AgentRead | None:
    """What a placement may assume of an agent it has no recent read of: a read marked
    ``kept`` and ``hint`` (so every session of the ledger counts on it by its
    reservation, and nothing else): its capacity from the inventory's
    declaration, else an earlier read (``record``, taken under the same declaration),
    else the swarm's node list (``node``: CPU and memory). None when GPU devices are not
    known (they are detected on the agent unless it declares ``gpu: 0``)."""
    resources = dict(declared.resources or {})
    agent = record.agent if record else AgentState()
    cpu = resources.get("cpu") or agent.cpu or (node.cpu if node else None)
    mem = resources.get("mem") or agent.mem or (node.mem if node else None)
    if str(resources.get("gpu")).strip() in ("0", "0.0"):
        devices: list[int] | None = []
    else:
        devices = agent.gpu_devices
    if not cpu or not mem or devices is None:
        return None
    try:
        capacity = agent_capacity({"cpu": cpu, "mem": mem}, ncpu=0, mem_total=0)
    except ValueError:  # a bad declaration: the agent's read names it
        return None
    identity = agent.id or (node.id if node else "")
    return AgentRead(
        name=declared.name,
        identity=str(identity or ""),
        read_at=0.0,
        agent=AgentState.from_dict(
            {
                "name": declared.name,
                "id": identity,
                "group": declared.group,
                "cpu": capacity.cpu,
                "mem": capacity.mem,
                "gpu": len(devices),
                "used_cpu": 0.0,
                "used_mem": 0,
                "used_gpu": 0,
                "gpu_devices": list(devices),
                "gpu_in_use": [],
            }
        ),
        sessions={},
        containers=(),
        images={},
        paths={},
        kept=True,
        hint=True,
    )
