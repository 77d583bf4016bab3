"""The queue in the session ledger (``Ledger.queue``: name -> entry): queueing a session,
taking it out, its place, the lease of a pass that starts it, and what list and show say
of it (docs/placement.md, "The queue").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_KINDS,
    WAIT_RESOURCES,
    WAIT_STARTING,
    WAIT_UNKNOWN,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    Ledger,
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queued import (
    Order,
    Waiting,
    entry_key,
    fifo,
    ordered,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import SessionSpec
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
    spec_canonical,
    spec_hash,
)

# An entry keeps what the session's start needs: the canonical request (``spec``, which
# bai_session_plan validates again at the start), its hash, the people's public keys,
# when it was submitted (by the ledger's clock) and its sequence number, the reason it
# waited at the last pass, and a lease while a scheduler pass starts it. A queued session
# holds no capacity and no reservation; it leaves the queue in the same compare-and-swap
# that reserves what it starts with.

QUEUED = "PENDING"


def queue_of(ledger: Ledger) -> dict[str, QueueEntry]:
    return dict(ledger.queue or {})


def as_spec(entry: QueueEntry) -> SessionSpec:
    """The request of a ledger queue entry, parsed once, the first time a step asks."""
    if entry.parsed is None:
        entry.parsed = normalize_spec(entry.spec)
    return entry.parsed


def as_waiting(entry: QueueEntry) -> Waiting:
    """The Waiting (what placement needs) of a ledger queue entry."""
    return waiting_of(
        as_spec(entry),
        float(entry.submitted_at),
        int(entry.seq or 0),
        bool(entry.head),
        home_of(entry),
    )


def home_of(entry: QueueEntry | None) -> tuple[str, ...]:
    """The agents a gang starting again ran on in its last attempt (() for none)."""
    attempts = (entry.attempts or []) if entry is not None else []
    members = (attempts[-1].members or {}) if attempts else {}
    return tuple(sorted({str(agent) for agent in members.values()}))


def waiting_of(
    spec: SessionSpec,
    submitted_at: float,
    seq: int,
    head: bool = False,
    home: tuple[str, ...] = (),
) -> Waiting:
    return Waiting(
        name=spec.name,
        group=spec.resource_group,
        mode=spec.mode,
        kernels=tuple(expand_kernels(spec)),
        submitted_at=submitted_at,
        seq=seq,
        owner=spec.owner,
        head=head,
        lifetime_s=float(spec.lifetime_s) if spec.lifetime_s else None,
        topology=spec.topology,
        prefer_s=spec.topology_prefer_s,
        home=home,
    )


def waiting(
    ledger: Ledger,
    order: Order = fifo,
    now: float | None = None,
    levels: Sequence[str] = (),
) -> list[Waiting]:
    """Every queued session of the ledger, in queue order; with ``now``, each at the
    topology level its wait has widened to (``levels``: the cluster's, widest first)."""
    found = (as_waiting(entry) for entry in queue_of(ledger).values())
    if now is not None:
        found = (w.widened(now, levels) for w in found)
    return ordered(found, order)


def next_seq(ledger: Ledger) -> int:
    return int(ledger.queue_seq or 0) + 1


def enqueue(
    ledger: Ledger,
    spec: SessionSpec,
    *,
    now: float,
    reason: str,
    wait: str = WAIT_RESOURCES,
    authorized_keys: Sequence[str] = (),
) -> QueueEntry:
    """Queue ``spec`` (PENDING) at the end of its group's queue, waiting for ``reason``
    (in one word: ``wait``); returns its entry."""
    seq = next_seq(ledger)
    ledger.queue_seq = seq
    raw: dict[str, Any] = {
        "name": spec.name,
        "spec": spec_canonical(spec),
        "spec_hash": spec_hash(spec),
        "group": spec.resource_group,
        "owner": spec.owner,
        "submitted_at": now,
        "seq": seq,
        "reason": reason,
        "wait": wait,
    }
    if authorized_keys:
        raw["authorized_keys"] = list(authorized_keys)
    entry = QueueEntry.from_dict(raw)
    put(ledger, entry)
    return entry


def put(ledger: Ledger, entry: QueueEntry) -> None:
    """Queue ``entry`` under its name (the queue's key comes with its first entry)."""
    if ledger.queue is None:
        ledger.queue = {}
    ledger.queue[entry.name] = entry


def dequeue(ledger: Ledger, name: str) -> QueueEntry | None:
    """Take ``name`` out of the queue (started, or cancelled); its entry, or None. The
    queue's key goes with its last entry."""
    entry = (ledger.queue or {}).pop(name, None)
    if not ledger.queue:
        ledger.queue = None
    return entry


def positions(ledger: Ledger, order: Order = fifo) -> dict[str, int]:
    """Each queued session's 1-based place in its resource group's queue."""
    out: dict[str, int] = {}
    count: dict[str, int] = {}
    entries = queue_of(ledger).values()
    for entry in sorted(entries, key=lambda e: entry_key(e, order)):
        out[entry.name] = count[entry.group] = count.get(entry.group, 0) + 1
    return out


def leased(entry: QueueEntry, now: float) -> bool:
    """Whether a scheduler pass is starting ``entry`` right now (its lease runs)."""
    lease = entry.lease or {}
    return float(lease.get("until") or 0) > now


def lease(entry: QueueEntry, ticket: str, now: float, lease_s: float) -> None:
    """Give the start of ``entry`` to the create that shows ``ticket``, for ``lease_s``."""
    entry.lease_to(ticket, now + lease_s)


def holds_ticket(entry: QueueEntry, ticket: str | None, now: float) -> bool:
    return bool(ticket) and leased(entry, now) and (entry.lease or {}).get("ticket") == ticket


def wait_kind(entry: QueueEntry, now: float | None = None) -> str:
    """Why a queued session waits, in one word of errors.WAIT_KINDS (``starting`` while
    a pass's lease on it runs at ``now``)."""
    if now is not None and leased(entry, now):
        return WAIT_STARTING
    kind = entry.wait
    return kind if kind in WAIT_KINDS else WAIT_UNKNOWN


def queued_view(entry: QueueEntry, position: int, now: float | None = None) -> dict[str, Any]:
    """What list, show and a queued create report of a queued session."""
    spec = entry.spec
    gang = entry.to_dict()
    return {
        "name": entry.name,
        "state": QUEUED,
        "owner": entry.owner or "",
        "resource_group": entry.group,
        "mode": spec.get("mode"),
        "size": sum(int(r.get("replicas") or 0) for r in spec.get("roles") or ()),
        "type": spec.get("type") or "interactive",
        "submitted_at": entry.submitted_at,
        "position": position,
        "reason": entry.reason or "",
        "wait": wait_kind(entry, now),
        **{key: spec[key] for key in ("topology", "topology_prefer_s") if spec.get(key)},
        # A batch session's gang waiting to start again (restarts.py).
        **{key: gang[key] for key in ("session_id", "attempt", "attempts") if key in gang},
    }
