"""The reservation ledger's document (docs/placement.md): its format, its states, its text.

Docker labels say what runs; they cannot say what another create, started a moment ago,
is about to start. So placement and the reservation it makes happen under one lock, in
one module run on one host of the cluster (the ledger host: the Swarm manager, else the
first agent), and the ledger on that host records, per session name, what each of its
containers was given: agent, CPU, memory, GPU devices.

The document is one JSON object of version :data:`VERSION`, read and written as a
:class:`Ledger` (:func:`loads`, :func:`dumps`), one attribute per top-level key:

- ``sessions``: name -> reservation (reservations.py). A new session counts by its
  reservation until every agent read surely shows its containers (:func:`settled`); from
  then on, by its running containers' labels, as every other session (usage.py). A
  reservation is ``creating`` (:data:`CREATING`, with an expiry: the create that made it
  may die) until the create confirms it ``ready`` (:data:`READY`).
- ``agents``: each agent's last read, kept so that a create need not read every agent
  (kept_reads.py).
- ``forsaken``: sessions a forced destroy released while agents did not answer
  (reservations.py, reconcile.py); ``ended``: how batch sessions ended (history.py);
  ``availability``: agents paused or drained (availability.py); ``queue`` and
  ``queue_seq``: sessions waiting their turn (queue/entries.py); ``aliases``: ledgers this
  one adopted; ``clock``: the ledger's time at its last write (ledger_store.py);
  ``counters``: ends, restarts, queue waits and passes, for the metrics (counters.py);
  ``usage``: each owner's decayed usage, for the queue's fair share (fair_usage.py).

Only ``version`` and ``sessions`` are always there (and ``agents`` in a new ledger);
every other key appears when a step first writes it, and a document read is written
back with the keys it had (unknown ones too, ``Ledger.extra``), byte for byte as read.

A missing or damaged ledger is never read as an empty ledger (:func:`loads`):
reconcile rebuilds a lost one from the containers' labels (:data:`REBUILD_HINT`).

Pure: the store (ledger_store.py) does the file or the swarm object, and the lock.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import LedgerError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.json_record import (
    Record,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    CREATING,
    READY,
    Attempt,
    Availability,
    Counters,
    Ended,
    Forsaken,
    KeptRead,
    QueueEntry,
    Reservation,
)

__all__ = [
    "CREATING",
    "READY",
    "VERSION",
    "Attempt",
    "Availability",
    "Counters",
    "Ended",
    "Forsaken",
    "KeptRead",
    "Ledger",
    "QueueEntry",
    "Reservation",
]

VERSION = 1
# A session's containers exist before its reservation is marked ready, so a read of an
# agent taken after that moment shows them. Both are timed by the ledger host's clock
# alone (kept_reads.this_run), never an agent's; this margin absorbs steps of that one clock.
# Within it a ready session counts by its reservation.
STALE_MARGIN_S = 5.0


REBUILD_HINT = (
    "rebuild it from the agents' labels: bai-cluster session reconcile "
    "(ansible-playbook playbooks/session_reconcile.yml)"
)


# The keys of the document that are optional (absent until first written), and the type
# each one's value has; a value of another type (never written by this toolkit) is kept
# as it is in ``Ledger.extra`` and the key reads as absent.
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "agents": dict,
    "queue": dict,
    "queue_seq": int,
    "ended": dict,
    "forsaken": dict,
    "aliases": list,
    "availability": dict,
    "clock": (int, float),
    "counters": dict,
    "usage": dict,
}
_R = TypeVar("_R", bound=Record)

# The optional keys whose values map a name or id to a typed record (records.py).
_RECORDS: dict[str, type[Record]] = {
    "agents": KeptRead,
    "availability": Availability,
    "queue": QueueEntry,
    "ended": Ended,
    "forsaken": Forsaken,
}


@dataclass
class Ledger:
    """The ledger's document (module docstring), one attribute per top-level key.

    ``version`` and ``sessions`` are always there. Every other key is optional: None
    while the document does not have it (it stays out of the text, as it was), and the
    code that first writes one makes it (``Ledger.agents = {}`` and so on); a key once
    there stays, empty or not, except ``queue`` (taken out when its last entry leaves,
    queue.dequeue). ``extra``: top-level keys this toolkit does not know, kept
    as they are so that they are written back unchanged. A reservation is a
    :class:`Reservation`, an agent's kept read a :class:`KeptRead`, a queue entry a
    :class:`QueueEntry`, an ended session an :class:`Ended`, a forced destroy's
    leftovers a :class:`Forsaken` and an agent held out of service an
    :class:`Availability` and the counters :class:`Counters` (records.py); the usage is
    the JSON object as read.
    """

    sessions: dict[str, Reservation] = field(default_factory=dict)
    agents: dict[str, KeptRead] | None = field(default_factory=dict)  # name -> its last read
    version: int = VERSION
    queue: dict[str, QueueEntry] | None = None  # name -> queue entry (queue/entries.py)
    queue_seq: int | None = None  # the last queue entry's sequence number
    ended: dict[str, Ended] | None = None  # session id -> how it ended (history.py)
    forsaken: dict[str, Forsaken] | None = None  # session id -> what a forced destroy left
    aliases: list[str] | None = None  # identities of ledgers this one adopted
    availability: dict[str, Availability] | None = None  # identity -> record (availability.py)
    clock: float | None = None  # the ledger's time at its last write
    counters: Counters | None = None  # what the scheduler did over time (counters.py)
    usage: dict[str, dict[str, float]] | None = None  # owner -> decayed units (fair_usage.py)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> Ledger:
        """A new ledger: ``version``, no sessions, no kept reads."""
        return cls()

    @classmethod
    def from_dict(cls, data: Any) -> Ledger:
        """The ledger of a parsed document; LedgerError when it is none (no ``sessions``
        mapping, another version)."""
        if not isinstance(data, dict) or not isinstance(data.get("sessions"), dict):
            raise LedgerError("the ledger has no 'sessions' mapping")
        if data.get("version") != VERSION:
            raise LedgerError(
                f"ledger version {data.get('version')!r}, this toolkit reads {VERSION}"
            )
        known = {"version", "sessions", *_OPTIONAL}
        extra = {k: v for k, v in data.items() if k not in known}
        found: dict[str, Any] = {}
        for key, kind in _OPTIONAL.items():
            value = data.get(key)
            if key in data and isinstance(value, kind) and not isinstance(value, bool):
                found[key] = value
            elif key in data:
                extra[key] = value
        return cls(
            version=data["version"],
            sessions={
                name: Reservation.from_dict(entry) for name, entry in data["sessions"].items()
            },
            agents=_records(found.get("agents"), KeptRead),
            queue=_records(found.get("queue"), QueueEntry),
            queue_seq=found.get("queue_seq"),
            ended=_records(found.get("ended"), Ended),
            forsaken=_records(found.get("forsaken"), Forsaken),
            aliases=found.get("aliases"),
            availability=_records(found.get("availability"), Availability),
            clock=found.get("clock"),
            counters=Counters.from_dict(found["counters"]) if "counters" in found else None,
            usage=found.get("usage"),
            extra=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        """The document as JSON writes it: every key the ledger has, none it has not. The
        records inside but the typed ones (_RECORDS, sessions) are this ledger's own (not
        copies)."""
        out: dict[str, Any] = dict(self.extra)
        out.update(
            version=self.version,
            sessions={name: entry.to_dict() for name, entry in self.sessions.items()},
        )
        for key in _OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.counters is not None:
            out["counters"] = self.counters.to_dict()
        for key in _RECORDS:
            records = getattr(self, key)
            if records is not None:
                out[key] = {name: record.to_dict() for name, record in records.items()}
        return out


def _records(table: Any, kind: type[_R]) -> dict[str, _R] | None:
    """The typed records of an optional key's ``table`` (None: the document has not got
    it; a mapping when it has, checked by from_dict)."""
    if table is None:
        return None
    return {name: kind.from_dict(raw) for name, raw in table.items()}


def empty() -> Ledger:
    return Ledger.empty()


def loads(text: str) -> Ledger:
    """Parse the ledger file's text. Empty text is a damaged ledger (a truncated file), never
    an empty one: reservations in it would vanish."""
    if not text.strip():
        raise LedgerError("the ledger file is empty (truncated?)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LedgerError(f"the ledger is not JSON ({exc})") from None
    return Ledger.from_dict(data)


def dumps(ledger: Ledger) -> str:
    return json.dumps(ledger.to_dict(), indent=1, sort_keys=True) + "\n"


def dumps_compact(ledger: Ledger) -> str:
    """The ledger in as few bytes as JSON allows (the swarm store's label)."""
    return json.dumps(ledger.to_dict(), separators=(",", ":"), sort_keys=True)


def settled(entry: Reservation) -> float:
    """When every read of the agents surely shows a ready session."""
    return float(entry.ready_at or 0) + STALE_MARGIN_S


def clock_text(epoch: Any) -> str:
    """An epoch as the time of day a message shows ("?" when there is none)."""
    try:
        return time.strftime("%H:%M:%S UTC", time.gmtime(float(epoch)))
    except (TypeError, ValueError):
        return "?"
