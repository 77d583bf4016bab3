"""The reservation ledger (docs/placement.md): what concurrent creates agree on.

Docker labels say what runs; they cannot say what another create, started a moment ago,
is about to start. So placement and the reservation it makes happen under one lock, in
one module run on one host of the cluster (the ledger host: the Swarm manager, else the
first agent), and the ledger file on that host records, per session name, what each of
its containers was given: agent, CPU, memory, GPU devices.

A new session counts by its reservation until every agent read surely shows its
containers; from then on, by its running containers' labels, as every other session
(a stopped session frees its CPUs and memory). A reservation still ``creating`` expires
after its TTL (the create that made it died), so nothing is blocked for ever and nothing
leaks; one whose session was removed without destroy is dropped once the reads show it
gone. destroy drops the reservation.

A ``creating`` reservation past its expiry is settled only once its agents were read
(:func:`expire`): dropped when they run nothing of it, adopted when they run all of it,
kept (counted) when they run part of it, for :func:`reconcile` to remove. Reconcile
makes the ledger and what the agents run agree, and rebuilds a lost ledger from the
containers' labels. A missing or damaged ledger file is never read as an empty ledger.

The ledger also keeps each agent's last read (``agents``: capacity, GPU devices, the
sessions it showed, which images and mount sources it has), so that a create need not
read every agent: placement uses a kept read where it is recent enough
(``read_max_age``) and knows the request's images and paths, places by a hint (declared
capacity, the ledger's sessions as load) elsewhere, and reads afresh only the agents it
must and those it placed on by a hint (:func:`sources`). A kept read is trusted only to
say yes: every session of the ledger counts on it by its reservation, whatever its
state, and a placement that finds no room with kept reads asks for fresh ones before it
says PENDING. destroy removes the session from the kept reads.

Pure: the module (plugins/modules/bai_session_ledger.py) does the file and the lock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import LedgerError, Pending
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT,
    LABEL_HOST,
    LABEL_LEDGER,
    LABEL_LIFETIME,
    LABEL_OWNER,
    LABEL_SESSION,
    LABEL_SESSION_ID,
    LABEL_SIZE,
    LABEL_SPEC_HASH,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import devices_in_use
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import availability
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.admission import SLOT_SEPARATOR
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    agent_capacity,
    used_from_labels,
)

VERSION = 1
CREATING = "creating"
READY = "ready"
# A session's containers exist before its reservation is marked ready, so a read of an
# agent taken after that moment shows them. Both are timed by the ledger host's clock
# alone (on_ledger_clock), never an agent's; this margin absorbs steps of that one clock.
# Within it a ready session counts by its reservation.
STALE_MARGIN_S = 5.0


REBUILD_HINT = (
    "rebuild it from the agents' labels: bai-cluster session reconcile "
    "(ansible-playbook playbooks/session_reconcile.yml)"
)


def empty() -> dict[str, Any]:
    return {"version": VERSION, "sessions": {}, "agents": {}}


def loads(text: str) -> dict[str, Any]:
    """Parse the ledger file's text. Empty text is a damaged ledger (a truncated file), never
    an empty one: reservations in it would vanish."""
    if not text.strip():
        raise LedgerError("the ledger file is empty (truncated?)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LedgerError(f"the ledger is not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("sessions"), dict):
        raise LedgerError("the ledger has no 'sessions' mapping")
    if data.get("version") != VERSION:
        raise LedgerError(f"ledger version {data.get('version')!r}, this toolkit reads {VERSION}")
    return data


def dumps(ledger: Mapping[str, Any]) -> str:
    return json.dumps(ledger, indent=1, sort_keys=True) + "\n"


def dumps_compact(ledger: Mapping[str, Any]) -> str:
    """The ledger in as few bytes as JSON allows (the swarm store's label)."""
    return json.dumps(ledger, separators=(",", ":"), sort_keys=True)


class Expiry(NamedTuple):
    """What :func:`expire` did with the ``creating`` reservations past their expiry."""

    dropped: list[str]  # its agents run nothing of it: the create died before making any
    adopted: list[str]  # its agents run all of it: the session counts as made (ready)
    stuck: list[str]  # its agents run part of it: kept (counted) until reconcile removes it


def expire(ledger: dict[str, Any], now: float, reads: Sequence[Mapping[str, Any]] = ()) -> Expiry:
    """Settle the ``creating`` reservations past their expiry, each only once fresh
    reads (``reads``, this run's, on the ledger's clock) of every agent it names, taken
    after it was reserved, show what its create left there. Until then it keeps counting:
    a create that died may have left containers running."""
    fresh = _fresh(reads)
    out = Expiry([], [], [])
    for name, entry in list(ledger["sessions"].items()):
        if entry.get("state") != CREATING or float(entry.get("expires_at") or 0) > now:
            continue
        found = _containers_found(entry, fresh)
        if found is None:
            continue
        if found == 0:
            del ledger["sessions"][name]
            forget_session(ledger, entry["session_id"])
            out.dropped.append(name)
        elif found >= len(entry["kernels"]):
            entry.update(state=READY, expires_at=None, ready_at=now, adopted=True)
            out.adopted.append(name)
        else:
            out.stuck.append(name)
    return out


def overdue_agents(ledger: Mapping[str, Any], now: float) -> list[str]:
    """The agents of ``creating`` reservations past their expiry that have no kept read
    taken since (so :func:`expire` can settle them once they are read)."""
    records = ledger.get("agents") or {}
    out: set[str] = set()
    for entry in ledger["sessions"].values():
        expires = float(entry.get("expires_at") or 0)
        if entry.get("state") != CREATING or expires > now:
            continue
        for kernel in entry["kernels"]:
            record = records.get(kernel["agent"]) or {}
            if float(record.get("stored_at") or 0) < expires:
                out.add(kernel["agent"])
    return sorted(out)


def _fresh(reads: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """This run's own reads of the agents, by agent name."""
    return {
        str(r["agent"].get("name")): r
        for r in reads
        if not r.get("kept") and not r.get("skipped") and "agent" in r
    }


def _containers_found(
    entry: Mapping[str, Any], fresh: Mapping[str, Mapping[str, Any]]
) -> int | None:
    """How many containers of ``entry``'s session the fresh reads of its agents show (each
    engine slot counted once); None when one of them was not read after it was reserved."""
    per_slot: dict[str, int] = {}
    for agent in {k["agent"] for k in entry["kernels"]}:
        read = fresh.get(agent)
        if read is None or float(read.get("read_at") or 0) < float(entry.get("reserved_at") or 0):
            return None
        slot = str(read["agent"].get("id") or agent)
        seen = (read.get("sessions") or {}).get(entry["session_id"]) or {}
        per_slot[slot] = int(seen.get("containers") or 0)
    return sum(per_slot.values())


def drop_stale(ledger: dict[str, Any], agent_info: Sequence[Mapping[str, Any]]) -> list[str]:
    """Drop ``ready`` reservations whose containers are gone from every agent they name,
    as read after they became ready (+ STALE_MARGIN_S); return their names."""
    read = {}
    for result in agent_info:
        agent = result.get("agent") or {}
        if result.get("kept"):
            continue
        if "sessions" in result and result.get("read_at") is not None:
            read[agent.get("name")] = (float(result["read_at"]), result["sessions"])
    gone = []
    for name, entry in ledger["sessions"].items():
        if entry.get("state") != READY:
            continue
        agents = {k["agent"] for k in entry["kernels"]}
        since = _settled(entry)
        if all(
            agent in read and read[agent][0] >= since and entry["session_id"] not in read[agent][1]
            for agent in agents
        ):
            gone.append(name)
    for name in gone:
        del ledger["sessions"][name]
    return gone


def on_ledger_clock(result: Mapping[str, Any]) -> dict[str, Any]:
    """A fresh agent read (a bai_agent_info result) timed by the ledger's clock: its
    ``read_after``, the ledger's time when this run asked for the read (so no later than
    the read itself), never the agent's own ``read_at``, which another host's clock gave.
    A read without it counts as one of unknown age (0): it never proves a session gone,
    nor settled."""
    return {**result, "read_at": float(result.get("read_after") or 0)}


def observed_sessions(containers: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per session id, what an agent's session containers (Docker API list entries:
    ``State``, ``Labels``), in any state, were given: CPU, memory and GPUs (as
    ``used_from_labels`` counts them), the GPU devices they hold, and how many containers
    there are. A session holds its share until it is destroyed
    (module_utils/scheduling/admission.py)."""
    out: dict[str, dict[str, Any]] = {}
    for item in containers:
        labels = item.get("Labels") or {}
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


def adjust(
    agent_info: Sequence[Mapping[str, Any]], ledger: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The agents' reads with the sessions they may not show yet counted by reservation.

    An agent's read counts the sessions it sees (``sessions``: session id -> what its
    running containers were given and the GPU devices they hold). A session still
    ``creating``, or ``ready`` so recently that the read may predate it (within
    STALE_MARGIN_S), counts by its reservation instead, which also covers containers not
    made yet. Every other session counts as read, so a stopped session frees its CPUs
    and memory as before (docs/placement.md). On a kept read (``kept``: from the ledger,
    not read by this run) every session of the ledger counts by its reservation.
    """
    by_id = {entry["session_id"]: entry for entry in ledger["sessions"].values()}
    on_agent: dict[str, list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for entry in by_id.values():
        for kernel in entry["kernels"]:
            on_agent.setdefault(kernel["agent"], []).append((entry, kernel))
    out = []
    for result in agent_info:
        if result.get("skipped") or "agent" not in result:
            out.append(dict(result))
            continue
        agent = dict(result["agent"])
        read_at = float(result.get("read_at") or 0)

        def counts(
            entry: Mapping[str, Any],
            read_at: float = read_at,
            kept: bool = bool(result.get("kept")),
        ) -> bool:
            return kept or entry.get("state") != READY or read_at < _settled(entry)

        seen = result.get("sessions") or {}
        replaced = [seen[sid] for sid in seen if sid in by_id and counts(by_id[sid])]
        mine = [
            kernel for entry, kernel in on_agent.get(str(agent.get("name")), ()) if counts(entry)
        ]
        for key in ("cpu", "mem", "gpu"):
            used = float(agent.get(f"used_{key}") or 0)
            used -= sum(float(s.get(key) or 0) for s in replaced)
            used += sum(float(k.get(key) or 0) for k in mine)
            used = max(used, 0.0)
            agent[f"used_{key}"] = round(used, 6) if key == "cpu" else round(used)
        held = set(agent.get("gpu_in_use") or ())
        held -= {d for s in replaced for d in s.get("gpu_devices") or ()}
        held |= {d for k in mine for d in k.get("gpu_devices") or ()}
        agent["gpu_in_use"] = sorted(held)
        out.append({**result, "agent": agent})
    return out


def _settled(entry: Mapping[str, Any]) -> float:
    """When every read of the agents surely shows a ready session."""
    return float(entry.get("ready_at") or 0) + STALE_MARGIN_S


def before_placing(entry: Mapping[str, Any] | None, existing: Sequence[Any], read_at: float) -> str:
    """What an existing reservation of the same name means for this create.

    Returns "place" (no reservation: place it; or a ready one that the reads prove gone),
    "exists" (the session is there: the usual rerun), or raises ``Pending`` when another
    run is creating it right now or made it after this run read the agents (waiting, with
    session_wait_s, ends in the rerun case).
    """
    if entry is None:
        return "exists" if existing else "place"
    if entry.get("state") == CREATING:  # not expired (expire() ran first)
        raise Pending(
            f"session {entry['name']} is being created by another run (reserved at "
            f"{_clock(entry.get('reserved_at'))}, until {_clock(entry.get('expires_at'))} at "
            f"most); wait for it (session_wait_s) or choose another name"
        )
    if existing:
        return "exists"
    if read_at < _settled(entry):
        raise Pending(
            f"session {entry['name']} was created by another run while this one read the "
            f"agents; run again to see it"
        )
    return "place"


def reservation(plan: Mapping[str, Any], *, now: float, ttl: float) -> dict[str, Any]:
    """The ledger entry for a plan (bai_session_plan's result) that is about to be made;
    its owner, when the spec names one, is what per-owner limits count, and its lifetime
    is counted from ``ready_at``."""
    given = plan.get("spec") or {}
    return {
        "name": plan["summary"]["name"],
        "session_id": plan["session_id"],
        "spec_hash": plan["spec_hash"],
        **{key: given[key] for key in ("owner", "lifetime_s") if given.get(key)},
        "state": CREATING,
        "reserved_at": now,
        "expires_at": now + ttl,
        "ready_at": None,
        "kernels": [
            {
                "host": k["hostname"],
                "agent": k["agent"],
                "cpu": float(k["resources"]["cpu"]),
                "mem": int(k["resources"]["mem"]),
                "gpu": int(k["resources"]["gpu"]),
                "gpu_devices": sorted(int(d) for d in k.get("gpu_devices") or ()),
            }
            for k in plan["kernels"]
        ],
    }


def mark_ready(ledger: dict[str, Any], name: str, session_id: str, now: float) -> bool:
    """Turn this run's reservation into the session's (no expiry); True if it changed."""
    entry = ledger["sessions"].get(name)
    if entry is None or entry["session_id"] != session_id or entry["state"] == READY:
        return False
    entry.update(state=READY, expires_at=None, ready_at=now)
    return True


def release(ledger: dict[str, Any], name: str, session_id: str | None = None) -> bool:
    """Drop the reservation of ``name`` (only if it is ``session_id``'s, when given)."""
    entry = ledger["sessions"].get(name)
    if entry is None or (session_id is not None and entry["session_id"] != session_id):
        return False
    del ledger["sessions"][name]
    forget_session(ledger, entry["session_id"])
    return True


def forsake(
    ledger: dict[str, Any], name: str, session_id: str, left_on: Sequence[str], now: float
) -> bool:
    """Release the reservation of ``name`` although its part on agents ``left_on`` was not
    removed (they did not answer: a forced destroy). The session's containers there are
    remembered by id (``forsaken``), so that reconcile removes them when those agents
    answer again, never takes them in; until then the agents' kept reads keep counting
    them. True if it changed the ledger."""
    entry = ledger["sessions"].get(name)
    if entry is None or entry["session_id"] != session_id:
        return False
    del ledger["sessions"][name]
    away = set(left_on)
    for agent, record in (ledger.get("agents") or {}).items():
        if agent not in away:
            forget_session({"agents": {agent: record}}, session_id)
    ledger.setdefault("forsaken", {})[session_id] = {
        "name": name,
        "agents": sorted(away),
        "at": now,
    }
    return True


# --- Lifetimes (session_lifetime_s) --------------------------------------------------


def time_left(entry: Mapping[str, Any], now: float) -> float | None:
    """Seconds session ``entry`` may still run (0 when its lifetime is up), counted from
    when it started running (``ready_at``, never its submission); None without a lifetime
    or before it runs."""
    lifetime = float(entry.get("lifetime_s") or 0)
    started = entry.get("ready_at")
    if not lifetime or entry.get("state") != READY or started is None:
        return None
    # Never more than the lifetime, whatever a clock said when it started.
    return min(lifetime, max(0.0, round(float(started) + lifetime - now, 3)))


def lifetimes_up(ledger: Mapping[str, Any], now: float) -> list[str]:
    """The sessions whose lifetime is up at ``now`` (the ledger's clock), by name."""
    return sorted(
        name for name, entry in (ledger.get("sessions") or {}).items() if time_left(entry, now) == 0
    )


# --- Batch sessions that ended (module_utils/jobs/job.py) ---------------------------------

# The ends the ledger remembers (the newest): what `session show` and `session logs` find
# once a batch session is gone. About 400 bytes each in the swarm store.
MAX_ENDED = 200
_ENDED_KEYS = ("state", "exit_code", "signal", "failed", "started", "ended", "reason", "members")


def record_end(
    ledger: dict[str, Any], name: str, session_id: str, end: Mapping[str, Any], now: float
) -> None:
    """Remember how batch session ``name`` (``session_id``) ended - ``end`` is
    job.combine's result: its state, exit code, the member that failed, when it started and
    ended, and each member's agent (where its output is kept) - at ``now``, keeping only
    the newest MAX_ENDED."""
    ended = ledger.setdefault("ended", {})
    ended[session_id] = {
        "name": name,
        "session_id": session_id,
        "removed_at": now,
        **{key: end.get(key) for key in _ENDED_KEYS},
    }
    for old in sorted(ended, key=lambda sid: ended[sid]["removed_at"])[:-MAX_ENDED]:
        del ended[old]


def ends_of(ledger: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """What the ledger remembers of the ended batch sessions called ``name``, newest first."""
    found = [dict(e) for e in (ledger.get("ended") or {}).values() if e.get("name") == name]
    return sorted(found, key=lambda e: e["removed_at"], reverse=True)


# --- An agent taken out of the cluster (bai-cluster agent remove) --------------------


class Forgotten(NamedTuple):
    """What :func:`forget_agent` dropped, or why it dropped nothing."""

    holding: list[str]  # sessions with a reservation on the agent: nothing was dropped
    dropped: list[str]  # what went, for a person: "its kept read", "its pause", ...


def forget_agent(ledger: dict[str, Any], name: str, identity: str = "") -> Forgotten:
    """Drop agent ``name`` (identity ``identity``) from the ledger: its kept read and its
    availability record. What a forced destroy left on it stays remembered (``forsaken``),
    so that reconcile removes those leftovers if it is ever added back. Refused
    while a session holds a reservation there (``holding``; the ledger is unchanged):
    its sessions are ended first, never stranded after."""
    holding = sorted(n for n, e in ledger["sessions"].items() if name in _agents_of(e))
    if holding:
        return Forgotten(holding, [])
    dropped = []
    if (ledger.get("agents") or {}).pop(name, None) is not None:
        dropped.append("its kept read")
    table = ledger.get("availability") or {}
    mine = [k for k, v in table.items() if (identity and k == identity) or v.get("name") == name]
    for key in mine:
        del table[key]
        if "its availability record" not in dropped:
            dropped.append("its availability record")
    return Forgotten([], dropped)


def known_identity(ledger: Mapping[str, Any], name: str) -> str:
    """The identity of the ledger's last read of agent ``name`` ('' if never read)."""
    record = (ledger.get("agents") or {}).get(name) or {}
    return str((record.get("agent") or {}).get("id") or "")


def _agents_of(entry: Mapping[str, Any]) -> set[str]:
    return {str(k["agent"]) for k in entry.get("kernels") or ()}


# --- Reconcile: the ledger and what the agents run, made to agree --------------------


class Reconciliation(NamedTuple):
    """What :func:`reconcile` found and did (session names; ``remove``: what the agents
    must remove, one row per agent and session)."""

    # run on the agents, unknown to the ledger (or left by a dead create): taken in
    adopted: list[str]
    dropped: list[str]  # reservations whose containers are gone from every agent they name
    remove: list[dict[str, Any]]  # {agent, session, session_id, containers}
    in_flight: list[str]  # a create still within its reservation: left alone
    incomplete: list[str]  # a confirmed session missing containers (a rerun of create repairs it)
    unchecked: list[str]  # reservations on agents that were not read: kept
    spared: list[str]  # unknown and incomplete, and not every agent was read: not removed
    conflicts: list[str]  # unknown, complete, and its name is another session's: left alone
    foreign: list[str]  # "NAME (ledger ID)": another ledger counts it: left alone
    forsaken: list[str]  # released by a forced destroy: its leftovers are removed


def reconcile(
    ledger: dict[str, Any],
    reads: Sequence[Mapping[str, Any]],
    *,
    now: float,
    every_agent_read: bool,
    ledgers: Sequence[str] = (),
) -> Reconciliation:
    """Make the ledger agree with what the agents run (docs/placement.md, "Reconcile").

    ``reads`` are this run's fresh bai_agent_info results, on the ledger's clock, each with
    every session container of its agent (``containers``, any state, with labels). What
    the engines run is the truth: a reservation is dropped only once every agent it names
    was read and runs nothing of it; a reservation past its expiry (its create died) is
    adopted when its agents run all of it and removed when they run part of it; a session
    the ledger does not know (a create whose reservation was dropped, or a lost ledger)
    is taken in from its labels when complete, and removed when incomplete, but only when
    every agent of the inventory was read (else its other part may be on one not read).
    A session whose containers name another ledger (LABEL_LEDGER not in ``ledgers``, this
    ledger's identity and those it adopted) is that ledger's: reported, left alone.
    Changes ``ledger``; the caller removes ``remove`` on the agents.
    """
    fresh = _fresh(reads)
    found: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for agent, read in fresh.items():
        for row in read.get("containers") or ():
            labels = row.get("labels") or {}
            sid = labels.get(LABEL_SESSION_ID)
            if sid:
                found.setdefault(sid, []).append((str(labels.get(LABEL_AGENT) or agent), row))
    out = Reconciliation([], [], [], [], [], [], [], [], [], [])
    forsaken = ledger.get("forsaken") or {}
    own = {str(x) for x in ledgers if x}
    known = set()
    for name, entry in sorted(ledger["sessions"].items()):
        sid = entry["session_id"]
        known.add(sid)
        agents = {k["agent"] for k in entry["kernels"]}
        if any(
            a not in fresh
            or float(fresh[a].get("read_at") or 0) < float(entry.get("reserved_at") or 0)
            for a in agents
        ):
            out.unchecked.append(name)
            continue
        rows = found.get(sid, [])
        if entry.get("state") == CREATING:
            if float(entry.get("expires_at") or 0) > now:
                out.in_flight.append(name)
            elif not rows:
                _drop(ledger, name, out.dropped)
            elif len(rows) >= len(entry["kernels"]):
                entry.update(state=READY, expires_at=None, ready_at=now, adopted=True)
                out.adopted.append(name)
            else:
                out.remove.extend(_removals(name, sid, rows))
                _drop(ledger, name, out.dropped)
        elif not rows:
            if all(float(fresh[a].get("read_at") or 0) >= _settled(entry) for a in agents):
                _drop(ledger, name, out.dropped)
            else:
                out.in_flight.append(name)  # confirmed while this run read the agents
        elif len(rows) < len(entry["kernels"]):
            out.incomplete.append(name)
    for sid, rows in sorted(found.items(), key=lambda kv: _label(kv[1], LABEL_SESSION)):
        if sid in known:
            continue
        name = _label(rows, LABEL_SESSION)
        if sid in forsaken:
            # Its destroy was forced while these agents did not answer: only leftovers.
            out.remove.extend({**row, "forced": True} for row in _removals(name, sid, rows))
            out.forsaken.append(name)
            continue
        other = _label(rows, LABEL_LEDGER)
        if own and other and other not in own:
            out.foreign.append(f"{name} (ledger {other})")
            continue
        try:
            size = int(_label(rows, LABEL_SIZE) or 0)
        except ValueError:
            size = 0
        if size and len(rows) >= size:
            if name in ledger["sessions"]:
                out.conflicts.append(name)
            else:
                ledger["sessions"][name] = adopted(name, sid, rows, now)
                out.adopted.append(name)
        elif every_agent_read:
            out.remove.extend(_removals(name, sid, rows))
        else:
            out.spared.append(name)
    for row in out.remove:
        forget_session(ledger, row["session_id"])
    # A forced destroy is settled once every agent it left was read and runs nothing of it.
    for sid, gone in list(forsaken.items()):
        if sid not in found and all(a in fresh for a in gone.get("agents") or ()):
            del forsaken[sid]
    return out


def adopted(
    name: str, session_id: str, rows: Sequence[tuple[str, Mapping[str, Any]]], now: float
) -> dict[str, Any]:
    """A ready ledger entry for a session the agents run, from its containers' labels
    (``rows``: agent name and bai_agent_info container row)."""
    kernels = []
    for agent, row in rows:
        labels = row.get("labels") or {}
        used = used_from_labels([labels])
        kernels.append(
            {
                "host": labels.get(LABEL_HOST) or row.get("name"),
                "agent": agent,
                "cpu": used.cpu,
                "mem": used.mem,
                "gpu": used.gpu,
                "gpu_devices": sorted(devices_in_use([labels])),
            }
        )
    owner, lifetime = _label(rows, LABEL_OWNER), _label(rows, LABEL_LIFETIME)
    return {
        "name": name,
        "session_id": session_id,
        "spec_hash": _label(rows, LABEL_SPEC_HASH),
        **({"owner": owner} if owner else {}),
        **({"lifetime_s": int(lifetime)} if lifetime.isdigit() and int(lifetime) else {}),
        "state": READY,
        "reserved_at": now,
        "expires_at": None,
        "ready_at": now,
        "adopted": True,
        "kernels": sorted(kernels, key=lambda k: str(k["host"])),
    }


def _removals(
    name: str, session_id: str, rows: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    per_agent: dict[str, int] = {}
    for agent, _row in rows:
        per_agent[agent] = per_agent.get(agent, 0) + 1
    return [
        {"agent": agent, "session": name, "session_id": session_id, "containers": count}
        for agent, count in sorted(per_agent.items())
    ]


def _drop(ledger: dict[str, Any], name: str, into: list[str]) -> None:
    entry = ledger["sessions"].pop(name)
    forget_session(ledger, entry["session_id"])
    into.append(name)


def _label(rows: Sequence[tuple[str, Mapping[str, Any]]], key: str) -> str:
    for _agent, row in rows:
        value = (row.get("labels") or {}).get(key)
        if value:
            return str(value)
    return ""


# --- Kept reads of the agents -------------------------------------------------------


def remember(
    ledger: dict[str, Any],
    agent_info: Sequence[Mapping[str, Any]],
    now: float,
    declared: Mapping[str, Any] | None = None,
) -> None:
    """Keep each fresh read (bai_agent_info results) as the agent's record, stamped
    ``stored_at`` by the ledger host's clock, with what the inventory declared for it
    (``declared``: agent -> {group, resources}; a record whose declaration changed is
    read again). What an older record knew of images and paths this read did not ask
    about is kept."""
    agents = ledger.setdefault("agents", {})
    for result in agent_info:
        if result.get("skipped") or result.get("kept") or "agent" not in result:
            continue
        name = str(result["agent"].get("name"))
        old = agents.get(name) or {}
        images = {
            **(old.get("images") or {}),
            **{
                ref: {"present": bool((found or {}).get("present"))}
                for ref, found in (result.get("images") or {}).items()
            },
        }
        agents[name] = {
            "stored_at": now,
            "read_at": float(result.get("read_at") or now),
            "agent": dict(result["agent"]),
            "sessions": dict(result.get("sessions") or {}),
            "images": images,
            "paths": {**(old.get("paths") or {}), **dict(result.get("paths") or {})},
            "declared": (declared or {}).get(name),
        }


def forget_session(ledger: dict[str, Any], session_id: str) -> None:
    """Take a removed session out of the kept reads (what it used is free again)."""
    for record in (ledger.get("agents") or {}).values():
        row = (record.get("sessions") or {}).pop(session_id, None)
        if row is None:
            continue
        agent = record["agent"]
        for key in ("cpu", "mem", "gpu"):
            left = max(float(agent.get(f"used_{key}") or 0) - float(row.get(key) or 0), 0.0)
            agent[f"used_{key}"] = round(left, 6) if key == "cpu" else round(left)
        freed = set(row.get("gpu_devices") or ())
        agent["gpu_in_use"] = sorted(set(agent.get("gpu_in_use") or ()) - freed)


def kept_result(record: Mapping[str, Any]) -> dict[str, Any]:
    """A kept record in the shape of a bai_agent_info result, marked ``kept``. It shows
    no containers: agents that may hold the session are always read afresh."""
    return {
        "agent": dict(record["agent"]),
        "sessions": dict(record.get("sessions") or {}),
        "read_at": record.get("read_at"),
        "images": dict(record.get("images") or {}),
        "paths": dict(record.get("paths") or {}),
        "containers": [],
        "kept": True,
    }


def holders(ledger: Mapping[str, Any], name: str) -> set[str]:
    """Agents that may hold session ``name``: those of its reservation and those whose
    kept read showed a session of that name."""
    entry = ledger["sessions"].get(name)
    found = {k["agent"] for k in entry["kernels"]} if entry else set()
    for agent, record in (ledger.get("agents") or {}).items():
        if any(row.get("name") == name for row in (record.get("sessions") or {}).values()):
            found.add(agent)
    return found


class Sources(NamedTuple):
    """Where a create gets each agent's state from (:func:`sources`)."""

    read: list[str]  # to read before placing: nothing else says enough of them
    kept: list[str]  # recent kept reads: a placement on them is made as it is
    hinted: dict[str, dict[str, Any]]  # agent -> hint: a placement on it reads it first
    unavailable: dict[str, str]  # agent -> why it takes no new session (paused, down)


def sources(
    ledger: Mapping[str, Any],
    agents: Sequence[Mapping[str, Any]],
    *,
    name: str,
    images: Sequence[str],
    paths: Sequence[str],
    fresh: set[str],
    now: float,
    max_age: float,
    nodes: Mapping[str, Mapping[str, Any]] | None = None,
    hints: bool = True,
    away: Mapping[str, str] | None = None,
) -> Sources:
    """How a create knows each agent of the inventory (``agents``: {name, group,
    resources}) that this run did not read (``fresh``), so that it reads only the agents
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
    records = ledger.get("agents") or {}
    away = away or {}
    holding = holders(ledger, name) | {a for a in overdue_agents(ledger, now) if a not in away}
    out = Sources([], [], {}, {})
    paused = availability.records(ledger)
    for declared in agents:
        agent = str(declared["name"])
        record = records.get(agent)
        node = node_of(nodes, agent, record)
        identity = str(((record or {}).get("agent") or {}).get("id") or "")
        why = away.get(agent) or availability.unavailable(agent, identity, paused, node)
        if why and agent not in holding:
            out.unavailable[agent] = why
            continue
        if agent in fresh:
            continue
        if agent in holding:
            out.read.append(agent)
            continue
        same = record is not None and record.get("declared") == _declaration(declared)
        if (
            same
            and record is not None
            and now - float(record.get("stored_at") or 0) <= max_age
            and all(ref in (record.get("images") or {}) for ref in images)
            and all(path in (record.get("paths") or {}) for path in paths)
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
    declared: Mapping[str, Any],
    record: Mapping[str, Any] | None = None,
    node: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """What a placement may assume of an agent it has no recent read of, in the shape of a
    bai_agent_info result marked ``kept`` and ``hint`` (so every session of the ledger
    counts on it by its reservation, and nothing else): its capacity from the inventory's
    declaration, else an earlier read (``record``, taken under the same declaration),
    else the swarm's node list (``node``: CPU and memory). None when GPU devices are not
    known (they are detected on the agent unless it declares ``gpu: 0``)."""
    resources = dict(declared.get("resources") or {})
    agent = dict((record or {}).get("agent") or {})
    cpu = resources.get("cpu") or agent.get("cpu") or (node or {}).get("cpu")
    mem = resources.get("mem") or agent.get("mem") or (node or {}).get("mem")
    if str(resources.get("gpu")).strip() in ("0", "0.0"):
        devices: list[int] | None = []
    else:
        devices = agent.get("gpu_devices") if "gpu_devices" in agent else None
    if not cpu or not mem or devices is None:
        return None
    try:
        capacity = agent_capacity({"cpu": cpu, "mem": mem}, ncpu=0, mem_total=0)
    except ValueError:  # a bad declaration: the agent's read names it
        return None
    return {
        "agent": {
            "name": str(declared["name"]),
            "id": agent.get("id") or (node or {}).get("id") or "",
            "group": declared.get("group") or "default",
            "cpu": capacity.cpu,
            "mem": capacity.mem,
            "gpu": len(devices),
            "used_cpu": 0.0,
            "used_mem": 0,
            "used_gpu": 0,
            "gpu_devices": list(devices),
            "gpu_in_use": [],
        },
        "sessions": {},
        "read_at": 0.0,
        "images": {},
        "paths": {},
        "containers": [],
        "kept": True,
        "hint": True,
    }


NODE_GONE = ("down", "disconnected")  # swarm node states that a placement passes over


def node_table(nodes: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The swarm's node list (``GET /nodes``, one call on a manager) by node ID and by
    hostname: ``id``, ``usable``, ``state``, ``availability``, ``cpu``, ``mem`` (what the
    engine has). Usable: active, and not ``down`` or ``disconnected``. A new swarm leader
    marks every node ``unknown`` until it registers again (seconds after a manager is
    lost); such a node is used, and a placement on it reads it first anyway."""
    table: dict[str, dict[str, Any]] = {}
    for node in nodes:
        description = node.get("Description") or {}
        resources = description.get("Resources") or {}
        state = str((node.get("Status") or {}).get("State") or "unknown")
        availability = str((node.get("Spec") or {}).get("Availability") or "active")
        node_id = str(node.get("ID") or "")
        hostname = str(description.get("Hostname") or "")
        row = {
            "id": node_id,
            "hostname": hostname,
            "state": state,
            "availability": availability,
            "usable": availability == "active" and state not in NODE_GONE,
            "cpu": int(resources.get("NanoCPUs") or 0) / 1e9,
            "mem": int(resources.get("MemoryBytes") or 0),
        }
        for key in (node_id, hostname):
            if key:
                table.setdefault(key, row)
    return table


def node_of(
    nodes: Mapping[str, Mapping[str, Any]] | None,
    agent: str,
    record: Mapping[str, Any] | None = None,
) -> Mapping[str, Any] | None:
    """An agent's row of :func:`node_table`: by the node ID its last read gave (an agent's
    identity is its swarm node's), else by its inventory name as the node's hostname."""
    if not nodes:
        return None
    identity = str(((record or {}).get("agent") or {}).get("id") or "")
    node_id = identity.split(SLOT_SEPARATOR, 1)[0]
    return nodes.get(node_id) or nodes.get(agent)


def _declaration(agent: Mapping[str, Any]) -> dict[str, Any]:
    return {"group": agent.get("group") or "default", "resources": agent.get("resources")}


def declarations(agents: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """agent name -> what the inventory declares for it, as records keep it."""
    return {str(a["name"]): _declaration(a) for a in agents}


def given_out(ledger: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per agent, what the reservations give out (CPU, memory, GPU devices)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in ledger["sessions"].values():
        for k in entry["kernels"]:
            row = out.setdefault(k["agent"], {"cpu": 0.0, "mem": 0, "gpu_devices": []})
            row["cpu"] += k["cpu"]
            row["mem"] += k["mem"]
            row["gpu_devices"] = sorted([*row["gpu_devices"], *k["gpu_devices"]])
    return out


def _clock(epoch: Any) -> str:
    try:
        return time.strftime("%H:%M:%S UTC", time.gmtime(float(epoch)))
    except (TypeError, ValueError):
        return "?"
