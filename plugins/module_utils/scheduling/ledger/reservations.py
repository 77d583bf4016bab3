"""Reservations: a session's entry in the ledger's ``sessions``, from its plan to its end.

A create reserves what its plan gives out (:func:`reservation`, ``creating``) and
confirms it once its containers exist (:func:`mark_ready`); destroy releases it
(:func:`release`, or :func:`forsake` when agents did not answer). A reservation still
``creating`` expires after its TTL (the create that made it died), so nothing is blocked
for ever and nothing leaks: past its expiry it is settled only once its agents were read
(:func:`expire`): dropped when they run nothing of it, adopted when they run all of it,
kept (counted) when they run part of it, for reconcile (reconcile.py) to remove. A session
with a lifetime ends when it is up (:func:`time_left`, :func:`lifetimes_up`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    CREATING,
    READY,
    Forsaken,
    Ledger,
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.kept_reads import (
    forget_in_record,
    forget_session,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.kinds import TYPE_BATCH
from ansible_collections.bai.cluster.plugins.module_utils.session.plan import SessionPlan


class Expiry(NamedTuple):
    """What :func:`expire` did with the ``creating`` reservations past their expiry."""

    dropped: list[str]  # its agents run nothing of it: the create died before making any
    adopted: list[str]  # its agents run all of it: the session counts as made (ready)
    stuck: list[str]  # its agents run part of it: kept (counted) until reconcile removes it


def expire(ledger: Ledger, now: float, reads: Sequence[AgentRead] = ()) -> Expiry:
    """Settle the ``creating`` reservations past their expiry, each only once fresh
    reads (``reads``, this run's, on the ledger's clock) of every agent it names, taken
    after it was reserved, show what its create left there. Until then it keeps counting:
    a create that died may have left containers running."""
    fresh = {read.name: read for read in reads if not read.kept}
    out = Expiry([], [], [])
    for name, entry in list(ledger.sessions.items()):
        if entry.state != CREATING or float(entry.expires_at or 0) > now:
            continue
        found = _containers_found(entry, fresh)
        if found is None:
            continue
        if found == 0:
            del ledger.sessions[name]
            forget_session(ledger, entry.session_id)
            out.dropped.append(name)
        elif found >= len(entry.kernels):
            entry.confirm(now, adopted=True)
            out.adopted.append(name)
        else:
            out.stuck.append(name)
    return out


def _containers_found(entry: Reservation, fresh: Mapping[str, AgentRead]) -> int | None:
    """How many containers of ``entry``'s session the fresh reads of its agents show (each
    engine slot counted once); None when one of them was not read after it was reserved."""
    per_slot: dict[str, int] = {}
    for agent in entry.agents:
        read = fresh.get(agent)
        if read is None or read.read_at < float(entry.reserved_at or 0):
            return None
        per_slot[read.identity or agent] = int(
            read.session(entry.session_id).get("containers") or 0
        )
    return sum(per_slot.values())


def reservation(plan: SessionPlan, *, now: float, ttl: float) -> Reservation:
    """The ledger entry for a plan that is about to be made; its owner, when the spec
    names one, is what per-owner limits count; its lifetime ends at its ``deadline``,
    from ``now``, and its end signal (``USR1@300``) goes out that long before
    (end_signals.py)."""
    spec = plan.spec
    kept = {
        "owner": spec.owner,
        "type": spec.type if spec.type == TYPE_BATCH else None,
        "lifetime_s": spec.lifetime_s,
        "end_signal": spec.end_signal,
    }
    raw = {
        "name": spec.name,
        "session_id": plan.session_id,
        "spec_hash": plan.spec_hash,
        **{key: value for key, value in kept.items() if value},
        **({"deadline": deadline(now, float(spec.lifetime_s))} if spec.lifetime_s else {}),
        "state": CREATING,
        "reserved_at": now,
        "expires_at": now + ttl,
        "ready_at": None,
        "kernels": [
            {
                "host": k.hostname,
                "agent": k.agent,
                "cpu": float(k.resources.cpu),
                "mem": int(k.resources.mem),
                "gpu": int(k.resources.gpu),
                "gpu_devices": sorted(int(d) for d in k.gpu_devices),
            }
            for k in plan.kernels
        ],
    }
    return Reservation.from_dict(raw)


def mark_ready(ledger: Ledger, name: str, session_id: str, now: float) -> bool:
    """Turn this run's reservation into the session's (no expiry); True if it changed."""
    entry = ledger.sessions.get(name)
    if entry is None or entry.session_id != session_id or entry.state == READY:
        return False
    entry.confirm(now)
    return True


def release(ledger: Ledger, name: str, session_id: str | None = None) -> bool:
    """Drop the reservation of ``name`` (only if it is ``session_id``'s, when given)."""
    entry = ledger.sessions.get(name)
    if entry is None or (session_id is not None and entry.session_id != session_id):
        return False
    del ledger.sessions[name]
    forget_session(ledger, entry.session_id)
    return True


def forsake(ledger: Ledger, name: str, session_id: str, left_on: Sequence[str], now: float) -> bool:
    """Release the reservation of ``name`` although its part on agents ``left_on`` was not
    removed (they did not answer: a forced destroy). The session's containers there are
    remembered by id (``forsaken``), so that reconcile removes them when those agents
    answer again, never takes them in; until then the agents' kept reads keep counting
    them. True if it changed the ledger."""
    entry = ledger.sessions.get(name)
    if entry is None or entry.session_id != session_id:
        return False
    del ledger.sessions[name]
    away = set(left_on)
    for agent, record in (ledger.agents or {}).items():
        if agent not in away:
            forget_in_record(record, session_id)
    if ledger.forsaken is None:
        ledger.forsaken = {}
    ledger.forsaken[session_id] = Forsaken.from_dict(
        {"name": name, "agents": sorted(away), "at": now}
    )
    return True


# --- Lifetimes (session_lifetime_s) --------------------------------------------------


def deadline(now: float, lifetime_s: float) -> int:
    """When a session placed at ``now`` with a lifetime ends (whole epoch seconds): its
    containers' BACKENDAI_SESSION_DEADLINE and LABEL_DEADLINE."""
    return math.ceil(now + lifetime_s)


def time_left(entry: Reservation, now: float) -> float | None:
    """Seconds session ``entry`` may still run (0 when its lifetime is up), up to its
    ``deadline``: counted from when it was placed (its agents' share was its from then),
    never its submission. An entry from before deadlines counts from ``ready_at``. None
    without a lifetime or before it runs."""
    lifetime = float(entry.lifetime_s or 0)
    if not lifetime or entry.state != READY:
        return None
    end = entry.deadline
    if end is None:
        started = entry.ready_at
        if started is None:
            return None
        end = float(started) + lifetime
    # Never more than the lifetime, whatever a clock said when it started.
    return min(lifetime, max(0.0, round(float(end) - now, 3)))


def lifetimes_up(ledger: Ledger, now: float) -> list[str]:
    """The sessions whose lifetime is up at ``now`` (the ledger's clock), by name."""
    return sorted(name for name, entry in ledger.sessions.items() if time_left(entry, now) == 0)
