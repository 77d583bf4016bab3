"""What the agents use, as the ledger counts it: reserved against observed.

An agent's read (bai_agent_info) says what its session containers were given
(:func:`observed_sessions`, run on the agent). A new session counts by its reservation
until every agent read surely shows its containers; from then on, by its containers'
labels, as every other session, so a stopped session frees its CPUs and memory
(:func:`adjust`). A ``ready`` reservation whose containers are gone from every agent it
names, as read after it settled, is dropped (:func:`drop_stale`); an existing
reservation of a name decides what a create of it does (:func:`before_placing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_LEDGER,
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import ContainerRow
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import devices_in_use
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    used_from_labels,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    CREATING,
    READY,
    Ledger,
    Reservation,
    clock_text,
    settled,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import Kernel


def observed_sessions(containers: Sequence[ContainerRow]) -> dict[str, dict[str, Any]]:
    """Per session id, what an agent's session containers, in any state, were given:
    CPU, memory and GPUs (as ``used_from_labels`` counts them), the GPU devices they
    hold, and how many containers there are. A session holds its share until it is destroyed
    (module_utils/scheduling/placement/admission.py)."""
    out: dict[str, dict[str, Any]] = {}
    for container in containers:
        labels = container.labels
        sid = labels.get(LABEL_SESSION_ID)
        if not sid:
            continue
        row = out.setdefault(
            sid,
            {
                "name": labels.get(LABEL_SESSION),
                "cpu": 0.0,
                "mem": 0,
                "gpu": 0,
                "gpu_devices": [],
                "containers": 0,
                "ledger": labels.get(LABEL_LEDGER) or "",
            },
        )
        row["containers"] += 1
        used = used_from_labels([labels])
        row["cpu"] = round(row["cpu"] + used.cpu, 6)
        row["mem"] += used.mem
        row["gpu"] += used.gpu
        held = devices_in_use([labels])
        row["gpu_devices"] = sorted(set(row["gpu_devices"]) | held)
    return out


def adjust(reads: Sequence[AgentRead], ledger: Ledger) -> list[AgentRead]:
    """The agents' reads with the sessions they may not show yet counted by reservation.

    An agent's read counts the sessions it sees (``sessions``: session id -> what its
    running containers were given and the GPU devices they hold). A session still
    ``creating``, or ``ready`` so recently that the read may predate it (within
    STALE_MARGIN_S), counts by its reservation instead, which also covers containers not
    made yet. Every other session counts as read, so a stopped session frees its CPUs
    and memory as before (docs/placement.md). On a kept read (``kept``: from the ledger,
    not read by this run) every session of the ledger counts by its reservation.
    """
    by_id = {entry.session_id: entry for entry in ledger.sessions.values()}
    on_agent: dict[str, list[tuple[Reservation, Kernel]]] = {}
    for entry in by_id.values():
        for kernel in entry.kernels:
            on_agent.setdefault(kernel.agent, []).append((entry, kernel))
    out = []
    for read in reads:
        agent = read.agent

        def counts(entry: Reservation, read: AgentRead = read) -> bool:
            return read.kept or entry.state != READY or read.read_at < settled(entry)

        seen = read.sessions or {}
        replaced = [seen[sid] for sid in seen if sid in by_id and counts(by_id[sid])]
        mine = [kernel for entry, kernel in on_agent.get(read.name, ()) if counts(entry)]
        cpu = float(agent.used_cpu or 0)
        mem = float(agent.used_mem or 0)
        gpu = float(agent.used_gpu or 0)
        held = set(agent.gpu_in_use or ())
        if replaced:
            cpu -= sum(float(s.get("cpu") or 0) for s in replaced)
            mem -= sum(float(s.get("mem") or 0) for s in replaced)
            gpu -= sum(float(s.get("gpu") or 0) for s in replaced)
            held -= {d for s in replaced for d in s.get("gpu_devices") or ()}
        if mine:
            cpu += sum(float(k.cpu or 0) for k in mine)
            mem += sum(float(k.mem or 0) for k in mine)
            gpu += sum(float(k.gpu or 0) for k in mine)
            held |= {d for k in mine for d in k.gpu_devices or ()}
        counted = agent.using(
            round(max(cpu, 0.0), 6), round(max(mem, 0.0)), round(max(gpu, 0.0)), sorted(held)
        )
        out.append(read.with_agent(counted))
    return out


def before_placing(entry: Reservation | None, existing: Sequence[Any], read_at: float) -> str:
    """What an existing reservation of the same name means for this create.

    Returns "place" (no reservation: place it; or a ready one that the reads prove gone),
    "exists" (the session is there: the usual rerun), or raises ``Pending`` when another
    run is creating it right now or made it after this run read the agents (waiting, with
    session_wait_s, ends in the rerun case).
    """
    if entry is None:
        return "exists" if existing else "place"
    if entry.state == CREATING:  # not expired (expire() ran first)
        raise Pending(
            f"session {entry.name} is being created by another run (reserved at "
            f"{clock_text(entry.reserved_at)}, until "
            f"{clock_text(entry.expires_at)} at "
            f"most); wait for it (session_wait_s) or choose another name"
        )
    if existing:
        return "exists"
    if read_at < settled(entry):
        raise Pending(
            f"session {entry.name} was created by another run while this one read the "
            f"agents; run again to see it"
        )
    return "place"


def drop_stale(ledger: Ledger, reads: Sequence[AgentRead]) -> list[str]:
    """Drop ``ready`` reservations whose containers are gone from every agent they name,
    as read after they became ready (+ STALE_MARGIN_S); return their names."""
    read = {r.name: (r.read_at, r.sessions) for r in reads if not r.kept and r.sessions is not None}
    gone = []
    for name, entry in ledger.sessions.items():
        if entry.state != READY:
            continue
        agents = {k.agent for k in entry.kernels}
        since = settled(entry)
        if all(
            agent in read and read[agent][0] >= since and entry.session_id not in read[agent][1]
            for agent in agents
        ):
            gone.append(name)
    for name in gone:
        del ledger.sessions[name]
    return gone
