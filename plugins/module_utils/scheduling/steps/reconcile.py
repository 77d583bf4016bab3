"""Reconcile: the ledger and what the agents run, made to agree (docs/placement.md,
"Reconcile"); it also rebuilds a lost ledger from the containers' labels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT,
    LABEL_BATCH,
    LABEL_DEADLINE,
    LABEL_END_SIGNAL,
    LABEL_HOST,
    LABEL_LEDGER,
    LABEL_LIFETIME,
    LABEL_OWNER,
    LABEL_RESTART_COUNT,
    LABEL_SESSION,
    LABEL_SESSION_ID,
    LABEL_SIZE,
    LABEL_SPEC_HASH,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
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
    Forsaken,
    Ledger,
    Reservation,
    settled,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.kept_reads import (
    forget_session,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import fencing

Rows = Sequence[tuple[str, ContainerRow]]  # agent name, the container as its read shows it
# Container states a start brings back: not "restarting" (Docker is at it), "paused"
# (someone paused it on purpose) or "dead" (Docker cannot start it).
STARTABLE = ("exited", "created")


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
    # A running interactive session with every container there but some stopped (Docker
    # did not bring them back after its engine restarted, or someone stopped them): what
    # to start, one row per agent and session {agent, session, session_id, containers}, ...
    stopped: list[dict[str, Any]]
    # ... then, once per such session, where to check its SSH mesh from (its master's
    # agent): {agent, session, session_id, master (container), hosts}.
    recheck: list[dict[str, Any]]


def reconcile(
    ledger: Ledger,
    fresh: Mapping[str, AgentRead],
    *,
    now: float,
    every_agent_read: bool,
    ledgers: Sequence[str] = (),
) -> Reconciliation:
    """Make the ledger agree with what the agents run (docs/placement.md, "Reconcile").

    ``fresh`` are this run's own reads of the agents, by name (kept_reads.fresh_reads: on
    the ledger's clock), each with every session container of its agent, in any state. What
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
    found = _by_session(fresh)
    earlier = _earlier_attempts(found, fencing.current_attempts(ledger))
    out = Reconciliation([], [], [], [], [], [], [], [], [], [], [], [])
    forsaken = ledger.forsaken or {}
    known = {entry.session_id for entry in ledger.sessions.values()}
    for name, entry in sorted(ledger.sessions.items()):
        _settle_reserved(ledger, name, entry, fresh, found.get(entry.session_id, []), now, out)
    own = {str(x) for x in ledgers if x}
    for sid, rows in sorted(found.items(), key=lambda kv: _label(kv[1], LABEL_SESSION)):
        if sid not in known:
            _settle_unknown(ledger, sid, rows, now, out, forsaken, own, every_agent_read)
    for row in out.remove:
        forget_session(ledger, row["session_id"])
    # What an earlier attempt of a restarted session left (its agent did not answer then):
    # removed by its attempt, never counted as the session's.
    out.remove.extend(earlier)
    # A forced destroy is settled once every agent it left was read and runs nothing of it.
    for sid, gone in list(forsaken.items()):
        if sid not in found and all(a in fresh for a in gone.agents or ()):
            del forsaken[sid]
    return out


def _by_session(fresh: Mapping[str, AgentRead]) -> dict[str, list[tuple[str, ContainerRow]]]:
    """The session containers the fresh reads show, by session id, with their agent."""
    found: dict[str, list[tuple[str, ContainerRow]]] = {}
    for agent, read in fresh.items():
        for row in read.containers:
            sid = row.label(LABEL_SESSION_ID)
            if sid:
                found.setdefault(sid, []).append((str(row.label(LABEL_AGENT) or agent), row))
    return found


def _earlier_attempts(
    found: dict[str, list[tuple[str, ContainerRow]]], attempts: Mapping[str, int]
) -> list[dict[str, Any]]:
    """Take the containers of earlier attempts of restarted sessions (fencing.py) out of
    ``found``; the removals that clear them, one per agent and session, each removing only
    containers of an attempt before ``before_attempt``."""
    out = []
    for sid, rows in list(found.items()):
        stale = fencing.stale_rows([row for _agent, row in rows], attempts)
        if not stale:
            continue
        ids = {id(row) for row in stale}
        old = [(agent, row) for agent, row in rows if id(row) in ids]
        found[sid] = [(agent, row) for agent, row in rows if id(row) not in ids]
        if not found[sid]:
            del found[sid]
        name = _label(old, LABEL_SESSION)
        out += [
            {**row, "forced": True, "before_attempt": attempts[sid]}
            for row in _removals(name, sid, old)
        ]
    return out


def _settle_reserved(
    ledger: Ledger,
    name: str,
    entry: Reservation,
    fresh: Mapping[str, AgentRead],
    rows: Rows,
    now: float,
    out: Reconciliation,
) -> None:
    """Reconcile the reservation ``entry`` of session ``name`` with the containers of it
    that the fresh reads show (``rows``)."""
    sid = entry.session_id
    agents = entry.agents
    if any(a not in fresh or fresh[a].read_at < float(entry.reserved_at or 0) for a in agents):
        out.unchecked.append(name)
        return
    if entry.state == CREATING:
        if float(entry.expires_at or 0) > now:
            out.in_flight.append(name)
        elif not rows:
            _drop(ledger, name, out.dropped)
        elif len(rows) >= len(entry.kernels):
            entry.confirm(now, adopted=True)
            out.adopted.append(name)
        else:
            out.remove.extend(_removals(name, sid, rows))
            _drop(ledger, name, out.dropped)
    elif not rows:
        if all(fresh[a].read_at >= settled(entry) for a in agents):
            _drop(ledger, name, out.dropped)
        else:
            out.in_flight.append(name)  # confirmed while this run read the agents
    elif len(rows) < len(entry.kernels):
        out.incomplete.append(name)
    else:
        _stopped(name, sid, rows, out)


def _stopped(name: str, sid: str, rows: Rows, out: Reconciliation) -> None:
    """A ready session whose containers are all there: when some are stopped, start them
    and check its mesh again (a batch session's stopped containers are its end, which
    the batch rules settle; docs/sessions.md, "After a restart")."""
    if any(row.label(LABEL_BATCH) for _agent, row in rows):
        return
    per_agent: dict[str, list[str]] = {}
    for agent, row in rows:
        if row.state in STARTABLE:
            per_agent.setdefault(agent, []).append(row.name)
    if not per_agent:
        return
    out.stopped.extend(
        {"agent": agent, "session": name, "session_id": sid, "containers": sorted(names)}
        for agent, names in sorted(per_agent.items())
    )
    by_host = sorted(rows, key=lambda r: str(r[1].label(LABEL_HOST) or ""))
    hosts = [str(row.label(LABEL_HOST) or "") for _agent, row in by_host]
    # From main1 (the master of every session without roles), else its first host by name.
    agent, master = by_host[hosts.index("main1") if "main1" in hosts else 0]
    out.recheck.append(
        {
            "agent": agent,
            "session": name,
            "session_id": sid,
            "master": master.name,
            "hosts": hosts,
        }
    )


def _settle_unknown(
    ledger: Ledger,
    sid: str,
    rows: Rows,
    now: float,
    out: Reconciliation,
    forsaken: Mapping[str, Forsaken],
    own: set[str],
    every_agent_read: bool,
) -> None:
    """Reconcile session ``sid``, which the agents run (``rows``) and the ledger does not
    know: take it in, remove it, or leave it alone (another ledger's, or not every agent
    was read)."""
    name = _label(rows, LABEL_SESSION)
    if sid in forsaken:
        # Its destroy was forced while these agents did not answer: only leftovers.
        out.remove.extend({**row, "forced": True} for row in _removals(name, sid, rows))
        out.forsaken.append(name)
        return
    other = _label(rows, LABEL_LEDGER)
    if own and other and other not in own:
        out.foreign.append(f"{name} (ledger {other})")
        return
    try:
        size = int(_label(rows, LABEL_SIZE) or 0)
    except ValueError:
        size = 0
    if size and len(rows) >= size:
        if name in ledger.sessions:
            out.conflicts.append(name)
        else:
            ledger.sessions[name] = adopted(name, sid, rows, now)
            out.adopted.append(name)
    elif every_agent_read:
        out.remove.extend(_removals(name, sid, rows))
    else:
        out.spared.append(name)


def adopted(name: str, session_id: str, rows: Rows, now: float) -> Reservation:
    """A ready ledger entry for a session the agents run, from its containers' labels
    (``rows``: agent name and bai_agent_info container row)."""
    kernels = []
    for agent, row in rows:
        labels = row.labels
        used = used_from_labels([labels])
        kernels.append(
            {
                "host": labels.get(LABEL_HOST) or row.name,
                "agent": agent,
                "cpu": used.cpu,
                "mem": used.mem,
                "gpu": used.gpu,
                "gpu_devices": sorted(devices_in_use([labels])),
            }
        )
    owner, lifetime = _label(rows, LABEL_OWNER), _label(rows, LABEL_LIFETIME)
    deadline, end_signal = _label(rows, LABEL_DEADLINE), _label(rows, LABEL_END_SIGNAL)
    attempt = _label(rows, LABEL_RESTART_COUNT)
    raw = {
        "name": name,
        "session_id": session_id,
        "spec_hash": _label(rows, LABEL_SPEC_HASH),
        **({"owner": owner} if owner else {}),
        **({"lifetime_s": int(lifetime)} if lifetime.isdigit() and int(lifetime) else {}),
        # When it ends, as its create's placement said: a rebuilt ledger does not restart it.
        **({"deadline": int(deadline)} if deadline.isdigit() else {}),
        **({"end_signal": end_signal} if end_signal else {}),
        # A batch session that restarted: its count stays (a rebuilt ledger lacks its
        # request, so it does not start again: docs/sessions.md, "Restarts").
        **({"attempt": int(attempt)} if attempt.isdigit() else {}),
        "state": READY,
        "reserved_at": now,
        "expires_at": None,
        "ready_at": now,
        "adopted": True,
        "kernels": sorted(kernels, key=lambda k: str(k["host"])),
    }
    return Reservation.from_dict(raw)


def _removals(name: str, session_id: str, rows: Rows) -> list[dict[str, Any]]:
    per_agent: dict[str, int] = {}
    for agent, _row in rows:
        per_agent[agent] = per_agent.get(agent, 0) + 1
    return [
        {"agent": agent, "session": name, "session_id": session_id, "containers": count}
        for agent, count in sorted(per_agent.items())
    ]


def _drop(ledger: Ledger, name: str, into: list[str]) -> None:
    entry = ledger.sessions.pop(name)
    forget_session(ledger, entry.session_id)
    into.append(name)


def _label(rows: Rows, key: str) -> str:
    for _agent, row in rows:
        value = row.label(key)
        if value:
            return str(value)
    return ""
