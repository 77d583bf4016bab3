"""A scheduler pass over the queue of PENDING sessions (docs/placement.md, "The queue"):
which start now.

Sessions wait in their resource group's queue in submission order (FIFO: submission
time, then the ledger's sequence number, then name), or, with
``bai_session_policies.queue.order: priority``, highest priority first
(queue_order.py: one ``order`` for every reading of the queue in a ledger step). A pass
over the queue (:func:`schedule`) goes through it in that order against what the agents
have free:

- a session the owner's limits refuse (policies.py) waits and blocks nobody:
  it holds nothing and claims no agent;
- a session that fits on the agents nobody ahead of it claimed starts, and what it takes
  is no longer free for those behind it;
- a session that does not fit waits, and *claims* every agent of its group that could
  ever run part of it (an agent whose total capacity holds one of its containers; for a
  single-node session, all of them). Those behind it may only start on agents no waiting
  session ahead of them claimed.

So a session behind a blocked head starts only where the head could never run: it never
takes capacity the head waits for, the head's chance to start depends only on the sessions
already running on its agents ending, and no number of later, smaller sessions can starve
it. Capacity freed on a claimed agent goes to the oldest session that claimed it first.
The price: a small session behind a big one waits even where it would have finished before
the big one could start - unless the policy turns on backfill (backfill.py,
``bai_session_policies.queue.backfill``): then a later session with a lifetime may start on
claimed agents when it ends before every claimer ahead of it could start.

Pure: no Ansible, no I/O; the ledger module runs it in its compare-and-swap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_BEHIND,
    WAIT_OWNER_LIMIT,
    Pending,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    OutOfService,
    Placement,
    assign_gpu_devices,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.backfill import (
    Running,
    earliest_start,
    why_not,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queued import (
    Backfill,
    Decision,
    Order,
    Waiting,
    fifo,
    ordered,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import MODE_SINGLE


def could_use(session: Waiting, agent: Agent) -> bool:
    """Whether ``agent`` could ever run part of ``session`` (by its total capacity; one
    that asks for a topology level, only on an agent with a domain at that level)."""
    if agent.group != session.group:
        return False
    level = session.level
    if level and not agent.label_map.get(level):
        return False
    if session.mode == MODE_SINGLE:
        return True  # a single-node session may collapse onto any agent that frees up
    return any(k.resources.fits_in(agent.total) for k in session.kernels)


def take(agents: Sequence[Agent], session: Waiting, placement: Placement) -> list[Agent]:
    """``agents`` once ``session`` runs where ``placement`` puts it (used, GPU devices)."""
    devices = assign_gpu_devices(session.kernels, placement.assignment, agents)
    out = []
    for agent in agents:
        mine = [k for k in session.kernels if placement.assignment[k.hostname] == agent.name]
        if not mine:
            out.append(agent)
            continue
        held = [d for k in mine for d in devices[k.hostname]]
        out.append(
            replace(
                agent,
                used_cpu=round(agent.used_cpu + sum(k.resources.cpu for k in mine), 6),
                used_mem=agent.used_mem + sum(k.resources.mem for k in mine),
                used_gpu=agent.used_gpu + sum(k.resources.gpu for k in mine),
                gpu_in_use=tuple(sorted({*agent.gpu_in_use, *held})),
            )
        )
    return out


def _place(
    session: Waiting, agents: Sequence[Agent], out_of_service: Sequence[OutOfService]
) -> Placement:
    return place(session.request, agents, out_of_service=out_of_service)


def _behind(ahead: Sequence[str]) -> str:
    return (
        f"waits behind {', '.join(ahead)} (ahead in the queue, waiting for agents this "
        f"session would use)"
    )


@dataclass(frozen=True)
class Room:
    """What a session's turn finds: the agents with what those ahead of it in the queue
    take when they start (``free``), and the agents claimed by those ahead that wait
    (``claimed``: agent -> the oldest session that claims it)."""

    free: tuple[Agent, ...]
    claimed: dict[str, str]

    def usable(self) -> list[Agent]:
        """The agents it may start on: free, and claimed by nobody ahead of it."""
        return [a for a in self.free if a.name not in self.claimed]

    def ahead(self, session: Waiting) -> tuple[str, ...]:
        """The sessions ahead that claim agents ``session`` could use, oldest first."""
        return tuple(
            dict.fromkeys(
                self.claimed[a.name]
                for a in self.free
                if a.name in self.claimed and could_use(session, a)
            )
        )


def schedule(
    queue: Iterable[Waiting],
    agents: Sequence[Agent],
    *,
    out_of_service: Sequence[OutOfService] = (),
    refuse: Callable[[Waiting, Sequence[Waiting]], str] | None = None,
    limit: int | None = None,
    order: Order = fifo,
    backfill: Backfill | None = None,
) -> list[Decision]:
    """One pass over ``queue`` (any order) against ``agents`` (in service, with their
    use): a Decision per session, in queue order (module docstring). ``refuse(session,
    started)`` says why the owner's limits refuse it, given the sessions this pass already
    started ("" to allow). ``limit``: stop deciding after this many starts (the rest are
    left out of the result). ``order``: the queue's order (queue_order.py). ``backfill``:
    let a later session with a lifetime start ahead of blocked ones it ends before."""
    return _pass(queue, agents, out_of_service, refuse, limit, None, order, backfill)[0]


def room(
    queue: Iterable[Waiting],
    session: Waiting,
    agents: Sequence[Agent],
    *,
    out_of_service: Sequence[OutOfService] = (),
    refuse: Callable[[Waiting, Sequence[Waiting]], str] | None = None,
    order: Order = fifo,
    backfill: Backfill | None = None,
) -> Room:
    """What is left for ``session`` once every session ahead of it in ``queue`` (it may
    be in there, or be a newcomer, then last of its group) had its turn: the same pass
    as :func:`schedule`, stopped at ``session``. A create places on ``Room.usable()``,
    so it never takes what an older queued session starts into or waits for."""
    others = [s for s in queue if s.name != session.name]
    queue = [*others, session]
    return _pass(queue, agents, out_of_service, refuse, None, session.name, order, backfill)[1]


class _Backfilling:
    """A pass's backfill book: each claimer's earliest start (estimated when it claims)
    and what this pass started, as running sessions with their ends."""

    def __init__(self, given: Backfill) -> None:
        self.given = given
        self.started: list[Running] = []
        self.starts: dict[str, float | None] = {}

    def claim(self, session: Waiting, free: Sequence[Agent]) -> None:
        running = [*self.given.running, *self.started]
        self.starts[session.name] = earliest_start(session.request, free, running, self.given.now)

    def allows(self, session: Waiting, ahead: Sequence[str]) -> bool:
        """It ends, margin included, before every blocked session ahead could start."""
        return bool(ahead) and not self.why_not(session, ahead)

    def why_not(self, session: Waiting, ahead: Sequence[str]) -> str:
        """Why it may not start ahead of ``ahead`` (backfill.why_not); "" when it may."""
        starts = {h: self.starts.get(h) for h in ahead}
        return why_not(session.lifetime_s, starts, self.given.now, self.given.margin_s)

    def waits(self, decision: Decision, claims: bool) -> Decision:
        """A waiting ``decision`` with its earliest start (when it claims) and why it
        does not backfill."""
        at = self.starts.get(decision.session.name) if claims else None
        why = self.why_not(decision.session, decision.behind) if decision.behind else ""
        return replace(decision, earliest_start=at, no_backfill=why)

    def ran(self, session: Waiting, placement: Placement, free: Sequence[Agent]) -> None:
        ends = None if session.lifetime_s is None else self.given.now + session.lifetime_s
        devices = assign_gpu_devices(session.kernels, placement.assignment, free)
        for k in session.kernels:
            self.started.append(
                Running(
                    placement.assignment[k.hostname],
                    k.resources.cpu,
                    k.resources.mem,
                    k.resources.gpu,
                    tuple(devices[k.hostname]),
                    ends,
                )
            )


def _pass(
    queue: Iterable[Waiting],
    agents: Sequence[Agent],
    out_of_service: Sequence[OutOfService],
    refuse: Callable[[Waiting, Sequence[Waiting]], str] | None,
    limit: int | None,
    until: str | None,
    order: Order,
    backfill: Backfill | None = None,
) -> tuple[list[Decision], Room]:
    decisions: list[Decision] = []
    started: list[Waiting] = []
    free = list(agents)
    claimed: dict[str, str] = {}  # agent -> the first waiting session that claims it
    position: dict[str, int] = {}  # session -> its place in its group's queue
    length: dict[str, int] = {}  # group -> sessions decided so far
    book = _Backfilling(backfill) if backfill is not None else None
    for session in ordered(queue, order):
        if session.name == until:
            usable = [a.name for a in free if could_use(session, a)]
            ahead = tuple(
                sorted({claimed[n] for n in usable if n in claimed}, key=position.__getitem__)
            )
            if book is not None and book.allows(session, ahead):
                return decisions, Room(tuple(free), {})  # it may backfill: nothing held back
            return decisions, Room(tuple(free), dict(claimed))
        where = position[session.name] = length[session.group] = length.get(session.group, 0) + 1
        why = refuse(session, started) if refuse else ""
        if why:
            decisions.append(Decision(session, reason=why, position=where, wait=WAIT_OWNER_LIMIT))
            continue
        usable = [a.name for a in free if could_use(session, a)]
        ahead = tuple(
            sorted({claimed[n] for n in usable if n in claimed}, key=position.__getitem__)
        )
        placement, claims = _start(session, free, usable, claimed, ahead, book, out_of_service)
        if isinstance(placement, Decision):
            mine: tuple[str, ...] = ()
            if claims:  # a session that can never fit holds nobody back
                mine = tuple(
                    n for n in usable if claimed.setdefault(n, session.name) == session.name
                )
                if book is not None:
                    book.claim(session, free)
            waits = replace(placement, position=where, claims=mine)
            decisions.append(book.waits(waits, claims) if book is not None else waits)
            continue
        if book is not None:
            book.ran(session, placement, free)
        free = take(free, session, placement)
        started.append(session)
        # Started on claimed capacity (backfill): ``behind`` names those it went ahead of.
        jumped = ahead if any(claimed.get(n) for n in placement.agents) else ()
        decisions.append(Decision(session, placement=placement, position=where, behind=jumped))
        if limit is not None and len(started) >= limit:
            break
    return decisions, Room(tuple(free), dict(claimed))


def _start(
    session: Waiting,
    free: Sequence[Agent],
    usable: Sequence[str],
    claimed: Mapping[str, str],
    ahead: tuple[str, ...],
    book: _Backfilling | None,
    out_of_service: Sequence[OutOfService],
) -> tuple[Placement | Decision, bool]:
    """Where ``session`` starts now (on agents nobody ahead claims, or, backfilling, on
    claimed ones it leaves before their claimers could start), else why it waits; and
    whether, waiting, it claims the agents it could use (not when they are all claimed
    already, nor when it can never fit). ``usable``: the agents of ``free`` it could use."""
    if usable and all(n in claimed for n in usable) and not (book and book.allows(session, ahead)):
        # Everything it could use is claimed: it waits its turn, no need to place.
        return Decision(session, reason=_behind(ahead), behind=ahead, wait=WAIT_BEHIND), False
    try:
        return _place(session, [a for a in free if a.name not in claimed], out_of_service), False
    except Pending as exc:
        reason, permanent, kind = exc.reason, exc.permanent, exc.kind
    if ahead:
        # Would it fit if nothing ahead claimed an agent? Then it waits its turn - or
        # starts now, when it ends before every one of them could start (backfill).
        try:
            placement = _place(session, free, out_of_service)
        except Pending as whole:
            reason, permanent, kind = whole.reason, whole.permanent, whole.kind
            if not permanent:
                reason = f"{reason}; behind {', '.join(ahead)} in the queue"
        else:
            if book is not None and book.allows(session, ahead):
                return replace(placement), False
            reason, permanent, kind = _behind(ahead), False, WAIT_BEHIND
    if permanent and session.prefer_s and session.level:
        permanent = False  # it widens to a level where it may fit: waiting helps
    waits = Decision(session, reason=reason, behind=ahead, wait=kind, permanent=permanent)
    return waits, not permanent
