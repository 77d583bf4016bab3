"""The cluster's metrics (docs/metrics.md) from one collection: the session ledger's read
(bai_session_ledger state=read: reservations, queue, counters, size), each agent's row
(hosts/agent_view.py: availability, health, offer, what is given out) and the sessions
the agents' engines run (containers/listing.py). Pure.

    families(ledger_read, agent_rows, sessions, now) -> [Family]
    collect(ledger_read, agent_rows, agent_reads, now) -> [Family]   (from the raw reads)

Cardinality is bounded by the cluster's shape, never by how many sessions ran: no session
name or id is a label. Labels: ``agent`` and ``resource_group`` (per agent, see
:data:`PER_AGENT`), ``state``, ``type``, ``owner`` (sessions), ``reason`` (a closed set,
errors.WAIT_KINDS), ``result`` and ``cause`` (closed sets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_KINDS,
    WAIT_TOPOLOGY,
    WAIT_UNKNOWN,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_SESSION
from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import (
    summarize_sessions,
)
from ansible_collections.bai.cluster.plugins.module_utils.metrics.exposition import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    Family,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import counters
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.availability import (
    AVAILABILITIES,
    WORDS,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.restart_policy import (
    RESTART_CAUSES,
)

PREFIX = "bai_"
PENDING = "PENDING"
# How a session can end (job results, and an interactive session's destroy).
END_RESULTS = ("succeeded", "failed", "cancelled", "lost", "timeout", "preempted", "destroyed")
# The series each agent adds: one per availability, then these.
PER_AGENT = len(AVAILABILITIES) + 11


def families(
    ledger: Mapping[str, Any] | None,
    agents: Sequence[Mapping[str, Any]],
    sessions: Sequence[Mapping[str, Any]],
    now: float,
) -> list[Family]:
    """Every family, in a fixed order. ``ledger``: the ledger read (None or a failed one
    when it could not be read: then only what the agents say); ``agents``: the agent
    rows; ``sessions``: the sessions the engines run (queued ones come from the ledger)."""
    read = ledger if ledger and "ledger" in ledger else None
    queue = list((read or {}).get("queue") or ())
    groups = sorted(
        {str(a.get("group") or "default") for a in agents}
        | {str(q.get("resource_group") or "default") for q in queue}
    )
    out = [
        _up(read is not None),
        _collected(now),
        _sessions(sessions, queue),
        *_queue(queue, groups, now),
        *_agents(agents),
    ]
    if read is not None:
        out += _history(counters_of(read), groups)
        out += _ledger(read)
    return [f for f in out if f.samples]


def counters_of(read: Mapping[str, Any]) -> dict[str, Any]:
    found = read.get("counters")
    return dict(found) if isinstance(found, Mapping) else {}


def _family(name: str, kind: str, help_text: str) -> Family:
    return Family(PREFIX + name, kind, help_text)


def _up(read: bool) -> Family:
    return _family("ledger_up", GAUGE, "1 when the session ledger could be read").add(
        None, 1 if read else 0
    )


def _collected(now: float) -> Family:
    return _family(
        "metrics_collected_timestamp_seconds", GAUGE, "When these metrics were collected"
    ).add(None, now)


def _sessions(sessions: Sequence[Mapping[str, Any]], queue: Sequence[Mapping[str, Any]]) -> Family:
    count: dict[tuple[str, str, str], int] = {}
    for row in [*sessions, *({**q, "state": PENDING} for q in queue)]:
        key = (
            str(row.get("state")),
            str(row.get("type") or "interactive"),
            str(row.get("owner") or ""),
        )
        count[key] = count.get(key, 0) + 1
    family = _family(
        "sessions",
        GAUGE,
        "Sessions by state (PENDING: queued; else as session list tells it), type and owner",
    )
    for (state, kind, owner), n in sorted(count.items()):
        family.add({"state": state, "type": kind, "owner": owner}, n)
    return family


def _queue(queue: Sequence[Mapping[str, Any]], groups: Sequence[str], now: float) -> list[Family]:
    pending = _family(
        "sessions_pending", GAUGE, "Queued sessions by resource group and why they wait"
    )
    oldest = _family(
        "queue_oldest_pending_seconds",
        GAUGE,
        "How long the longest-waiting queued session of a resource group has waited (0: none)",
    )
    topology = _family(
        "sessions_pending_topology",
        GAUGE,
        "Queued sessions that ask for one domain of a topology level (by resource group "
        "and level) and wait because no single domain has room, though the agents together do",
    )
    for group in groups:
        mine = [q for q in queue if str(q.get("resource_group") or "default") == group]
        kinds = [q.get("wait") if q.get("wait") in WAIT_KINDS else WAIT_UNKNOWN for q in mine]
        for reason in WAIT_KINDS:
            n = kinds.count(reason)
            pending.add({"resource_group": group, "reason": reason}, n)
        # A series per level that queued sessions of the group ask for (at most 3).
        for level in sorted({str(q["topology"]) for q in mine if q.get("topology")}):
            n = sum(
                1 for q in mine if q.get("topology") == level and q.get("wait") == WAIT_TOPOLOGY
            )
            topology.add({"resource_group": group, "level": level}, n)
        since = [
            counters.queued_since(QueueEntry.from_dict(q))
            for q in mine
            if q.get("submitted_at") is not None
        ]
        oldest.add({"resource_group": group}, max(now - min(since), 0.0) if since else 0)
    return [pending, topology, oldest]


_AGENT_GAUGES = (
    ("agent_cpus", "CPUs the agent offers", lambda r: r["offer"]["cpu"]),
    ("agent_cpus_allocated", "CPUs given out to sessions", lambda r: r["given_out"]["cpu"]),
    ("agent_memory_bytes", "Memory the agent offers", lambda r: r["offer"]["mem"]),
    (
        "agent_memory_allocated_bytes",
        "Memory given out to sessions",
        lambda r: r["given_out"]["mem"],
    ),
    ("agent_gpus", "GPU devices the agent offers", lambda r: len(r["offer"]["gpu_devices"])),
    (
        "agent_gpus_allocated",
        "GPU devices given out to sessions",
        lambda r: len(r["given_out"]["gpu_devices"]),
    ),
    ("agent_sessions", "Sessions with a container on the agent", lambda r: len(r["sessions"])),
    (
        "agent_session_containers",
        "Session containers the agent's engine holds, in any state",
        lambda r: r.get("containers", 0),
    ),
)


def _agents(rows: Sequence[Mapping[str, Any]]) -> list[Family]:
    availability = _family(
        "agent_availability",
        GAUGE,
        "1 for the agent's availability (active, pause, drain), 0 for the others",
    )
    up = _family(
        "agent_up", GAUGE, "1 when the agent's engine answered (and its swarm node is ready)"
    )
    in_service = _family(
        "agent_in_service", GAUGE, "1 when the agent takes new sessions (active and up)"
    )
    read = _family(
        "agent_read_from_engine",
        GAUGE,
        "1 when the agent's use was read from its engine, 0 from the ledger (it did not answer)",
    )
    gauges = [(_family(name, GAUGE, text), pick) for name, text, pick in _AGENT_GAUGES]
    for row in rows:
        labels = {"agent": str(row["name"]), "resource_group": str(row.get("group") or "default")}
        for word in AVAILABILITIES:
            availability.add({**labels, "availability": WORDS[word]}, row["availability"] == word)
        up.add(labels, row.get("health") == "ready")
        in_service.add(labels, bool(row.get("in_service")))
        read.add(labels, row.get("source") == "engine")
        for family, pick in gauges:
            family.add(labels, float(pick(row)))
    return [availability, up, in_service, read, *(pair[0] for pair in gauges)]


def _history(found: Mapping[str, Any], groups: Sequence[str]) -> list[Family]:
    ends = _family("session_ends", COUNTER, "Sessions that ended, by type and result")
    recorded = dict(found.get("ends") or {})
    kinds = ("batch", "interactive")
    for kind in kinds:
        for result in END_RESULTS:
            recorded.setdefault(f"{kind}/{result}", 0)
    for key, n in sorted(recorded.items()):
        kind, result = key.split("/", 1) if "/" in key else (key, "")
        ends.add({"type": kind, "result": result}, n)
    restarts = _family("session_restarts", COUNTER, "Batch gangs queued to start again, by cause")
    for cause in RESTART_CAUSES:
        restarts.add({"cause": cause}, int((found.get("restarts") or {}).get(cause) or 0))
    wait = _family(
        "queue_wait_seconds", HISTOGRAM, "How long sessions waited in the queue before placement"
    )
    bounds = list(found.get("wait_buckets_s") or counters.WAIT_BUCKETS_S)
    waits = dict(found.get("wait") or {})
    for group in sorted(set(groups) | set(waits)):
        hist = waits.get(group) or {}
        wait.add_histogram(
            {"resource_group": group},
            bounds,
            list(hist.get("buckets") or ()),
            float(hist.get("sum") or 0),
        )
    return [ends, restarts, wait, *_passes(found)]


def _passes(found: Mapping[str, Any]) -> list[Family]:
    schedule = dict(found.get("schedule") or {})
    reconcile = dict(found.get("reconcile") or {})
    out = [
        _family(
            "scheduler_last_pass_timestamp_seconds",
            GAUGE,
            "When the last scheduler pass that found sessions queued ran (0: never)",
        ).add(None, float(schedule.get("at") or 0)),
        _family(
            "scheduler_pass_duration_seconds",
            GAUGE,
            "What the last scheduler pass took to decide, in the ledger's transaction",
        ).add(None, float(schedule.get("seconds") or 0)),
        _family("scheduler_passes", COUNTER, "Scheduler passes that found sessions queued").add(
            None, int(schedule.get("passes") or 0)
        ),
        _family(
            "reconcile_last_pass_timestamp_seconds", GAUGE, "When reconcile last ran (0: never)"
        ).add(None, float(reconcile.get("at") or 0)),
        _family("reconcile_passes", COUNTER, "Reconcile passes").add(
            None, int(reconcile.get("passes") or 0)
        ),
        _family(
            "ledger_cas_retries",
            COUNTER,
            "Ledger writes that met a newer version and started again",
        ).add(None, int(found.get("retries") or 0)),
    ]
    return out


def _ledger(read: Mapping[str, Any]) -> list[Family]:
    out = []
    if read.get("ledger_bytes") is not None:
        out.append(
            _family(
                "ledger_bytes",
                GAUGE,
                "The session ledger's size as compact JSON (the swarm store's)",
            ).add(None, int(read["ledger_bytes"]))
        )
    if read.get("ledger_max_bytes"):
        out.append(
            _family(
                "ledger_max_bytes", GAUGE, "The most the ledger's store takes (swarm store only)"
            ).add(None, int(read["ledger_max_bytes"]))
        )
    return out


def collect(
    ledger: Mapping[str, Any] | None,
    rows: Sequence[Mapping[str, Any]],
    reads: Sequence[Mapping[str, Any]],
    now: float,
) -> list[Family]:
    """:func:`families` from the raw reads: ``reads`` are the agents' bai_agent_info
    results (those that answered), whose containers make the sessions and the counts."""
    found = [r for r in reads if isinstance(r, Mapping) and "agent" in r]
    containers = [c for r in found for c in r.get("containers") or ()]
    per_agent: dict[str, int] = {}
    for container in containers:
        if LABEL_SESSION in (container.get("labels") or {}):
            agent = str(container.get("agent"))
            per_agent[agent] = per_agent.get(agent, 0) + 1
    answered = {str(r["agent"].get("name")) for r in found}
    unreached = [str(row["name"]) for row in rows if str(row["name"]) not in answered]
    reservations = ((ledger or {}).get("ledger") or {}).get("sessions") or {}
    sessions = summarize_sessions(containers, reservations, unreached, now=now)
    counted = [{**row, "containers": per_agent.get(str(row["name"]), 0)} for row in rows]
    return families(ledger, counted, sessions, now)
