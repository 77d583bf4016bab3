"""A queued session as the queue sees it (``Waiting``),
what a pass decides for it (``Decision``), and the order of the queue (``Order``: FIFO by
default, queue_order.py's priority order when the policy asks for it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Placement,
    PlacementRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    constraints_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.backfill import Running
from ansible_collections.bai.cluster.plugins.module_utils.session.model import Kernel
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    widening,
)


@dataclass(frozen=True)
class Waiting:
    """A queued session: what placement needs, and its place in the queue."""

    name: str
    group: str
    mode: str
    kernels: tuple[Kernel, ...]
    submitted_at: float
    seq: int = 0
    owner: str = ""
    # A batch session's gang starting again (scheduling/steps/restarts.py): at the head of its
    # group, ahead of every session submitted after or before it.
    head: bool = False
    # How long it runs at most (its own lifetime, else its owner's longest): what
    # backfill needs (backfill.py); None: no lifetime, it never backfills.
    lifetime_s: float | None = None
    # The topology level it asked for ("" for none), how long it waits for one domain of
    # it before widening (0: however long; session/topology_request.py), and the level a
    # pass places it by now (None: the one it asked for; ``widened``).
    topology: str = ""
    prefer_s: int = 0
    level_now: str | None = None
    first: tuple[str, ...] = ()  # once widened: the narrower levels tried first
    home: tuple[str, ...] = ()  # a gang starting again: the agents of its last attempt
    # The topology level it is placed by now ("" for none): a field, not a property, as
    # a pass reads it for every agent of every queued session (scheduler.could_use).
    level: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        level = self.topology if self.level_now is None else self.level_now
        object.__setattr__(self, "level", level)

    def widened(self, now: float, levels: Sequence[str]) -> Waiting:
        """This session as a pass at ``now`` places it: at the level its wait in the queue
        has widened to (``levels``: the cluster's, widest first)."""
        waited = now - self.submitted_at
        level, first = widening(self.topology, self.prefer_s, waited, levels)
        if level == self.topology and first == self.first:
            return self
        return replace(self, level_now=level, first=first)

    @cached_property
    def request(self) -> PlacementRequest:
        """What every placement of this session is asked (made once: a pass places a
        queued session many times)."""
        return PlacementRequest(
            self.kernels, self.mode, self.group, constraints_of(self.level, self.first, self.home)
        )


@dataclass(frozen=True)
class Backfill:
    """What lets a pass start a later session ahead of a blocked one (backfill.py): the
    running sessions with their ends, the time, and the margin a lifetime may overrun."""

    running: tuple[Running, ...] = ()
    now: float = 0.0
    margin_s: float = 0.0


@dataclass(frozen=True)
class Decision:
    """What one pass decided for a queued session: ``placement`` when it starts now, else
    ``reason`` (why it waits) and ``behind`` (the sessions ahead that claim the agents it
    could use, oldest first; empty when nothing ahead holds it back)."""

    session: Waiting
    placement: Placement | None = None
    reason: str = ""
    behind: tuple[str, ...] = ()
    position: int = 0  # 1-based place in its group's queue
    wait: str = ""  # why it waits, in one word (errors.WAIT_KINDS); "" when it starts
    permanent: bool = False  # it can never fit: it claims nothing
    claims: tuple[str, ...] = ()  # the agents it claims (first): what it waits for
    # With backfill: when it could start at the earliest (None: no estimate), and why it
    # may not start ahead of ``behind`` ("" when nothing ahead holds it back).
    earliest_start: float | None = None
    no_backfill: str = ""

    @property
    def starts(self) -> bool:
        return self.placement is not None


# The sort key of a queued session: (group, owner, head, submitted_at, seq, name) -> key.
# queue_order.QueueOrder gives the priority order; :func:`fifo` is submission order.
Order = Callable[[str, str, bool, float, int, str], tuple[Any, ...]]


def fifo(
    group: str, owner: str, head: bool, submitted_at: float, seq: int, name: str
) -> tuple[Any, ...]:
    """Submission order within a group; a gang starting again first."""
    del owner
    return (group, 0 if head else 1, submitted_at, seq, name)


def queue_key(session: Waiting, order: Order = fifo) -> tuple[Any, ...]:
    return order(
        session.group, session.owner, session.head, session.submitted_at, session.seq, session.name
    )


def entry_key(entry: QueueEntry, order: Order = fifo) -> tuple[Any, ...]:
    """A ledger queue entry's place, as :func:`queue_key` gives a Waiting's."""
    return order(
        entry.group,
        str(entry.owner or ""),
        bool(entry.head),
        float(entry.submitted_at),
        int(entry.seq or 0),
        entry.name,
    )


def ordered(queue: Iterable[Waiting], order: Order = fifo) -> list[Waiting]:
    """The queue in the order sessions start: by group, then ``order``."""
    return sorted(queue, key=lambda s: queue_key(s, order))
