"""The queue of PENDING sessions (docs/placement.md, "The queue"): which start now.

Sessions wait in their resource group's queue in submission order (FIFO: submission
time, then the ledger's sequence number, then name). A pass over the queue
(:func:`schedule`) goes through it in that order against what the agents have free:

- a session the owner's limits refuse (module_utils/policies.py) waits and blocks nobody:
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
the big one could start (backfill by expected end times needs every session's lifetime,
which is optional here).

Pure: no Ansible, no I/O; the ledger module runs it in its compare-and-swap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from ansible_collections.bai.cluster.plugins.module_utils.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.model import MODE_SINGLE, Kernel
from ansible_collections.bai.cluster.plugins.module_utils.placement import (
    Agent,
    OutOfService,
    Placement,
    assign_gpu_devices,
    place,
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

    @property
    def starts(self) -> bool:
        return self.placement is not None


def queue_key(session: Waiting) -> tuple[float, int, str]:
    return (session.submitted_at, session.seq, session.name)


def ordered(queue: Iterable[Waiting]) -> list[Waiting]:
    """The queue in the order sessions start: by group, then submission order."""
    return sorted(queue, key=lambda s: (s.group, *queue_key(s)))


def could_use(session: Waiting, agent: Agent) -> bool:
    """Whether ``agent`` could ever run part of ``session`` (by its total capacity)."""
    if agent.group != session.group:
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
    return place(
        session.kernels,
        agents,
        mode=session.mode,
        resource_group=session.group,
        out_of_service=out_of_service,
    )


def _behind(ahead: Sequence[str]) -> str:
    return (
        f"waits behind {', '.join(ahead)} (ahead in the queue, waiting for agents this "
        f"session would use)"
    )


def schedule(
    queue: Iterable[Waiting],
    agents: Sequence[Agent],
    *,
    out_of_service: Sequence[OutOfService] = (),
    refuse: Callable[[Waiting, Sequence[Waiting]], str] | None = None,
    limit: int | None = None,
) -> list[Decision]:
    """One pass over ``queue`` (any order) against ``agents`` (in service, with their
    use): a Decision per session, in queue order (module docstring). ``refuse(session,
    started)`` says why the owner's limits refuse it, given the sessions this pass already
    started ("" to allow). ``limit``: stop deciding after this many starts (the rest are
    left out of the result)."""
    decisions: list[Decision] = []
    started: list[Waiting] = []
    free = list(agents)
    claimed: dict[str, str] = {}  # agent -> the first waiting session that claims it
    position: dict[str, int] = {}  # session -> its place in its group's queue
    length: dict[str, int] = {}  # group -> sessions decided so far
    for session in ordered(queue):
        where = position[session.name] = length[session.group] = length.get(session.group, 0) + 1
        why = refuse(session, started) if refuse else ""
        if why:
            decisions.append(Decision(session, reason=why, position=where))
            continue
        usable = [a.name for a in free if could_use(session, a)]
        ahead = tuple(
            sorted({claimed[n] for n in usable if n in claimed}, key=position.__getitem__)
        )
        if usable and all(n in claimed for n in usable):
            # Everything it could use is claimed: it waits its turn, no need to place.
            reason = _behind(ahead)
            decisions.append(Decision(session, reason=reason, behind=ahead, position=where))
            continue
        try:
            placement = _place(session, [a for a in free if a.name not in claimed], out_of_service)
        except Pending as exc:
            reason, permanent = exc.reason, exc.permanent
            if ahead:
                # Would it fit if nothing ahead claimed an agent? Then it waits its turn.
                try:
                    _place(session, free, out_of_service)
                    reason = _behind(ahead)
                    permanent = False
                except Pending as whole:
                    reason, permanent = whole.reason, whole.permanent
                    if not permanent:
                        reason = f"{reason}; behind {', '.join(ahead)} in the queue"
            if not permanent:  # a session that can never fit holds nobody back
                for name in usable:
                    claimed.setdefault(name, session.name)
            decisions.append(Decision(session, reason=reason, behind=ahead, position=where))
            continue
        free = take(free, session, placement)
        started.append(session)
        decisions.append(Decision(session, placement=placement, position=where))
        if limit is not None and len(started) >= limit:
            break
    return decisions
