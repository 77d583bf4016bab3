"""bai_session_ledger's steps: what each O(state) does with one read of the ledger, inside
the store's transaction (ledger_store.transact), which writes the ledger when a step asks.

- ``reserved``: place and reserve a session (reserve.py);
- ``ready``: confirm a create's reservation; ``absent``: release it, cancel a queued
  session, or forsake what a forced destroy could not reach;
- ``read`` and ``identity``: what the ledger holds, changing nothing;
- ``reconciled``: the ledger made to agree with the agents' reads (reconcile.py);
- ``scheduled``: which queued sessions start now (schedule.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.engine.common import error_text
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import queue as queue_
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    counters,
    document,
    history,
    kept_reads,
    reservations,
    roster,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    fair_usage,
    preemption,
    queue_order,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import (
    end_signals,
    fencing,
    reconcile,
    restarts,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerFailure,
    LedgerRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.reserve import reserve
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.schedule import (
    decide,
    queue_list,
    queued_view,
    scheduled,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import JobEnd


def _ignore(_message: str) -> None:
    pass


def swarm_nodes(
    request: LedgerRequest, store: store_.Store, warn: Callable[[str], None] = _ignore
) -> dict[str, roster.SwarmNode] | None:
    """The swarm's node list by node ID and hostname (one call on this manager), for a
    placement; None without a swarm, or when the list cannot be had (then every agent
    counts as up)."""
    placing = request.state in ("reserved", "scheduled")
    explaining = request.state == "read" and request.agents is not None  # a pass, dry
    if not (placing or explaining) or not isinstance(store, store_.SwarmStore):
        return None
    try:
        return roster.node_table(store.api.nodes())
    except Exception as exc:  # the engine's, else raised again
        if not isinstance(exc, store_.engine_errors(store)):
            raise
        warn(f"the swarm's node list: {error_text(exc)}; placing without it")
        return None


def step(
    request: LedgerRequest,
    store: store_.Store,
    snapshot: store_.Snapshot,
    now: float,
    nodes: Mapping[str, roster.SwarmNode] | None = None,
    warn: Callable[[str], None] = _ignore,
) -> dict[str, Any]:
    """What O(state) does with one read of the ledger (the store writes it when asked)."""
    state, where = request.state, store.where
    ledger, missing = snapshot.ledger, snapshot.missing
    if state == "identity":
        return store_.identity_read(snapshot, now)
    if snapshot.damaged and state != "reconciled":
        damaged = snapshot.damaged
        raise LedgerFailure(f"{where}: {damaged}; {document.REBUILD_HINT}; nothing was changed")
    # Its identity (and those it adopted): on the session's containers, checked by agents.
    ids = store_.ledger_ids(
        store.identity(create=state in ("reserved", "reconciled") and not request.check_mode),
        ledger,
    )
    if state == "reconciled":
        return rebuilt(request, snapshot, now, ids)
    if state == "reserved":
        placed = reserve(request, ledger, now, missing, where, ids, nodes, warn)
        return {**placed, "ledger_ids": ids}
    if state == "scheduled":
        return scheduled(request, ledger, now, nodes)
    if state == "ready":
        return confirmed(request, ledger, now, where)
    if state == "absent":
        return released(request, ledger, now)
    read = shown(request, ledger, now, missing, nodes)
    if not request.name:
        # Its size as the swarm store writes it, and that store's cap (none for a file).
        read["ledger_bytes"] = len(document.dumps_compact(ledger))
        swarm = isinstance(store, store_.SwarmStore)
        read["ledger_max_bytes"] = store_.MAX_LEDGER_BYTES if swarm else None
    return read


def confirmed(request: LedgerRequest, ledger: Ledger, now: float, where: str) -> dict[str, Any]:
    """state=ready: this create's reservation turned into the session's."""
    held = None if request.name is None else ledger.sessions.get(request.name)
    gone = held is None or held.session_id != request.session_id
    # In check mode nothing was reserved, so there is nothing to confirm.
    if gone and not request.check_mode:
        # Its containers were made by an agent that admitted them, but the ledger no
        # longer counts them: this create must not report success.
        raise LedgerFailure(
            f"session {request.name}: this create's reservation is gone from "
            f"{where} (it outlived session_reservation_ttl_s and a check of its agents "
            f"found nothing of it, or the ledger was rebuilt); the session is not confirmed"
        )
    changed = reservations.mark_ready(ledger, str(request.name), str(request.session_id), now)
    return {"changed": changed, "reservation": held.to_dict() if held else None}


def released(request: LedgerRequest, ledger: Ledger, now: float) -> dict[str, Any]:
    """state=absent: a forced destroy's reservation forsaken, a queued session cancelled,
    or a destroyed session's reservation released (and how a batch session ended kept)."""
    name = str(request.name)
    held = ledger.sessions.get(name)
    # A session a preemption stopped ended preempted, whatever its command did once warned.
    given = preemption.victim_end(held, JobEnd.of(request.ended), request.session_id)
    # A preempted attempt (a preemption, or a forced drain) is not its owner's doing: its
    # usage is not charged to their fair share.
    preempted = given is not None and given.state == preemption.PREEMPTED
    if given and request.session_id:
        # A batch session whose end its restart policy counts: queued again, at the head
        # (a part left on agents that did not answer stopped by itself: fencing.py).
        again = restarts.restart(ledger, name, request.session_id, given, now, request.left_on)
        if again is not None:
            if not preempted and held is not None:
                fair_usage.charge_end(ledger, held, now)  # the attempt that ended
            return {
                "changed": True,
                "restarted": {"attempt": again.attempt, "reason": again.reason},
                "waiting": len(queue_.queue_of(ledger)),
            }
    if request.left_on:
        forsaken = reservations.forsake(ledger, name, str(request.session_id), request.left_on, now)
        if forsaken and held is not None:
            fair_usage.charge_end(ledger, held, now)
        return {"changed": forsaken}
    if not request.session_id and name in queue_.queue_of(ledger):
        # A queued session is cancelled: it leaves the queue (it holds nothing else); one
        # waiting to start again is remembered by its last attempt's end.
        cancelled = queue_.dequeue(ledger, name)
        last = restarts.last_end(cancelled) if cancelled else None
        if cancelled and last is not None:
            owner = str(cancelled.owner or "")
            history.record_end(ledger, name, str(cancelled.session_id), last, now, owner)
        kind = ((cancelled.spec if cancelled else None) or {}).get("type") or "interactive"
        counters.count_end(ledger, kind, counters.CANCELLED)
        return {"changed": True, "cancelled": True, "waiting": len(queue_.queue_of(ledger))}
    owner = str(held.owner or "") if held else ""
    mine = held is not None and held.session_id == request.session_id
    earlier = [a.to_dict() for a in held.attempts or ()] if held and mine else []
    known = bool(request.session_id and request.session_id in (ledger.ended or {}))
    released = reservations.release(ledger, name, request.session_id)
    if released and not preempted and held is not None:
        fair_usage.charge_end(ledger, held, now)
    if given and request.session_id:
        end = given.with_attempts(len(earlier), earlier)
        history.record_end(ledger, name, request.session_id, end, now, owner)
    if released or (given and not known):
        # Counted once: a destroy run again finds nothing left to release or record.
        kind = str((held.type if held else None) or ("batch" if given else "interactive"))
        state = given.state if given else None
        counters.count_end(ledger, kind, str(state or counters.DESTROYED))
    return {
        "changed": released or bool(given and request.session_id),
        "waiting": len(queue_.queue_of(ledger)),
    }


def _passed(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    nodes: Mapping[str, roster.SwarmNode] | None,
    ordering: queue_order.QueueOrder,
) -> dict[str, queue_.Decision]:
    """The scheduler pass's decisions now (schedule.decide, changing nothing), by name,
    when the read names the agents (O(agents)); else none."""
    if request.agents is None or not ledger.queue:
        return {}
    return {d.session.name: d for d in decide(request, ledger, now, nodes, ordering)}


def _queued_explained(
    request: LedgerRequest,
    ledger: Ledger,
    name: str,
    now: float,
    nodes: Mapping[str, roster.SwarmNode] | None,
) -> dict[str, Any] | None:
    """A queued session's view with why it is where it is (queue_order.explain)."""
    entry = queue_.queue_of(ledger).get(name)
    if entry is None:
        return None
    ordering = queue_order.order_of(request.policy, ledger, now, full=True)
    decision = _passed(request, ledger, now, nodes, ordering).get(name)
    return {
        **queued_view(ledger, name, ordering),
        "explain": queue_order.explain(ordering, entry, decision),
    }


def _queue_explained(
    request: LedgerRequest, ledger: Ledger, now: float, nodes: Mapping[str, roster.SwarmNode] | None
) -> list[dict[str, Any]]:
    """The whole queue in order, each session with why it is where it is."""
    ordering = queue_order.order_of(request.policy, ledger, now, full=True)
    entries = queue_.queue_of(ledger)
    decisions = _passed(request, ledger, now, nodes, ordering)
    return [
        {
            **view,
            "explain": queue_order.explain(
                ordering, entries[view["name"]], decisions.get(view["name"])
            ),
        }
        for view in queue_list(ledger, now, ordering)
    ]


def shown(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    missing: str,
    nodes: Mapping[str, roster.SwarmNode] | None = None,
) -> dict[str, Any]:
    """state=read: one session's entry with O(name), else the whole ledger; changing
    nothing."""
    read: dict[str, Any] = {"changed": False, "ledger_time": now}
    if missing:
        read["missing"] = True
    name = request.name
    if name:
        entry = ledger.sessions.get(name)
        found = {
            **read,
            "reservation": entry.to_dict() if entry else None,
            "time_left": reservations.time_left(entry, now) if entry else None,
            "holders": sorted(kept_reads.holders(ledger, name)),
            "ended": history.ends_of(ledger, name),
            "queued": _queued_explained(request, ledger, name, now, nodes),
        }
        if request.owner is not None:
            _refuse_others(ledger, name, request.owner)
        return found
    return {
        **read,
        "ledger": {
            "sessions": {key: entry.to_dict() for key, entry in ledger.sessions.items()},
            "given_out": roster.given_out(ledger),
        },
        "queue": _queue_explained(request, ledger, now, nodes),
        "counters": counters.read(ledger),
    }


def _refuse_others(ledger: Ledger, name: str, owner: str) -> None:
    """An owner-scoped read (O(owner)) of a session another owner holds (its reservation,
    else its queue entry, else its newest end): LedgerFailure."""
    held = ledger.sessions.get(name) or queue_.queue_of(ledger).get(name)
    known = held or next(iter(history.ended_as(ledger, name)), None)
    if known is not None and str(known.owner or "") != owner:
        raise LedgerFailure(
            f"session {name} is held by another owner, not {owner}; nothing was changed",
            not_owner=True,
        )


def rebuilt(
    request: LedgerRequest, snapshot: store_.Snapshot, now: float, ids: list[str]
) -> dict[str, Any]:
    """state=reconciled: the ledger (with the ledgers it adopts) rebuilt from the agents'
    labels; a damaged ledger is kept beside it."""
    ledger, missing = snapshot.ledger, snapshot.missing
    for other in request.adopt_ledgers:
        if other not in ids:
            if ledger.aliases is None:
                ledger.aliases = []
            ledger.aliases.append(other)
            ids.append(other)
    how = (
        f"damaged - {snapshot.damaged}"
        if snapshot.damaged
        else ("missing" if missing == "lost" else "new" if missing else None)
    )
    done = reconciled(request, ledger, now, ids)
    return {**done, "rebuilt": how, "set_aside": True, "ledger_ids": ids}


def reconciled(
    request: LedgerRequest, ledger: Ledger, now: float, ids: Sequence[str]
) -> dict[str, Any]:
    """The ledger made to agree with the agents' reads."""
    reads = kept_reads.this_run(request.agent_info or [], answered_only=True)
    names = {read.name for read in reads}
    # Its reads skip GPU detection, so they are not kept as the agents' records; reconcile()
    # forgets the sessions it dropped or removed.
    inventory = list(request.inventory) if request.agents is not None else sorted(names)
    unread = [a for a in inventory if a not in names]
    fresh = kept_reads.fresh_reads(reads)
    done = reconcile.reconcile(ledger, fresh, now=now, every_agent_read=not unread, ledgers=ids)
    counters.note_pass(ledger, "reconcile", now)
    # A session whose lifetime is up is ended below, never started again.
    ending = reservations.lifetimes_up(ledger, now)
    warned = end_signals.due(ledger, now)
    # Gangs whose part on an agent that did not answer has stopped by itself: destroyed
    # below (forced there), then queued again (restarts.py).
    over = fencing.fenced(ledger, fresh, unread)
    return {
        "changed": bool(done.adopted or done.dropped or done.remove or warned),
        "save": True,
        **done._asdict(),
        "stopped": [r for r in done.stopped if r["session"] not in ending],
        "recheck": [r for r in done.recheck if r["session"] not in ending],
        "unread": unread,
        "held": sorted(ledger.sessions),
        "lifetime_up": ending,
        "end_signals": warned,
        "fenced": [f for f in over if f["name"] not in ending],
        "fence_in": fencing.fence_in(ledger, fresh, unread),
        "waiting": len(queue_.queue_of(ledger)),
    }
