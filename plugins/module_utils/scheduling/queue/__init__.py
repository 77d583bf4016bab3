"""The queue (docs/placement.md, "The queue"): its sessions, their order and policies,
and the scheduler pass that says which start now.

    queued.py       Waiting (a queued session), Decision (what a pass decided), the order
    entries.py      the queue in the session ledger: enqueue, dequeue, positions, leases
    scheduler.py    the pure pass: schedule, room, what a started session takes
    queue_order.py  the priority order and its explanation; priority.py its factors;
                    fair_usage.py each owner's usage
    backfill.py     a later session ahead of a blocked one, by lifetimes
    preemption.py   preemptible sessions stopped for a higher priority
    policies.py     owners' limits, priorities and shares

The names of queued.py, entries.py and scheduler.py are the package's face: code outside
the package imports them from here (``from ...scheduling import queue as queue_``); the
package's own files import each other by file.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.entries import (
    QUEUED,
    as_spec,
    as_waiting,
    dequeue,
    enqueue,
    holds_ticket,
    home_of,
    lease,
    leased,
    next_seq,
    positions,
    put,
    queue_of,
    queued_view,
    wait_kind,
    waiting,
    waiting_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queued import (
    Backfill,
    Decision,
    Order,
    Waiting,
    entry_key,
    fifo,
    ordered,
    queue_key,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.scheduler import (
    Room,
    could_use,
    room,
    schedule,
    take,
)

__all__ = [
    "QUEUED",
    "Backfill",
    "Decision",
    "Order",
    "Room",
    "Waiting",
    "as_spec",
    "as_waiting",
    "could_use",
    "dequeue",
    "enqueue",
    "entry_key",
    "fifo",
    "holds_ticket",
    "home_of",
    "lease",
    "leased",
    "next_seq",
    "ordered",
    "positions",
    "put",
    "queue_key",
    "queue_of",
    "queued_view",
    "room",
    "schedule",
    "take",
    "wait_kind",
    "waiting",
    "waiting_of",
]
