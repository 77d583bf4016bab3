"""Backfill by lifetimes (docs/placement.md, "Backfill"): a later session may start ahead
of a blocked one when it ends before the blocked one could start.

The blocked session's *earliest start* is an estimate: every running session on the
agents ends when its lifetime is up (placed at + lifetime), nothing else starts, and the
first of now and those ends at which placement finds the blocked session room is its
start. A session in its way without a lifetime never ends in the estimate: then there is
no estimate, and nothing backfills ahead of it.

A later session backfills when it has a lifetime (its own, or its owner's longest) and
``now + lifetime + margin`` is at most the earliest start: at that start it has ended, so
the agents are as they would have been without it, and the blocked session's start never
moves later because of it (the property tests check this over random clusters). The
margin covers how late a lifetime is enforced (the housekeeping pass's interval, the stop
grace). Sessions without a lifetime never backfill. Pure: no Ansible, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    PlacementRequest,
    place,
)


@dataclass(frozen=True)
class Running:
    """What one running session holds on one agent, and when its lifetime is up (None:
    no lifetime)."""

    agent: str
    cpu: float
    mem: int
    gpu: int = 0
    gpu_devices: tuple[int, ...] = ()
    ends_at: float | None = None


def held_by(entry: Reservation, ends_at: float | None) -> list[Running]:
    """What a reservation (a ledger entry) holds, one row per container, ending at
    ``ends_at``."""
    return [
        Running(
            str(k.agent),
            float(k.cpu or 0),
            int(k.mem or 0),
            int(k.gpu or 0),
            tuple(int(d) for d in k.gpu_devices or ()),
            ends_at,
        )
        for k in entry.kernels or ()
    ]


def freed(agents: Sequence[Agent], running: Sequence[Running], at: float) -> list[Agent]:
    """``agents`` once every session of ``running`` that ends by ``at`` has ended."""
    out = []
    for agent in agents:
        gone = [
            r
            for r in running
            if r.agent == agent.name and r.ends_at is not None and r.ends_at <= at
        ]
        if not gone:
            out.append(agent)
            continue
        devices = {d for r in gone for d in r.gpu_devices}
        out.append(
            replace(
                agent,
                used_cpu=round(agent.used_cpu - sum(r.cpu for r in gone), 6),
                used_mem=agent.used_mem - sum(r.mem for r in gone),
                used_gpu=agent.used_gpu - sum(r.gpu for r in gone),
                gpu_in_use=tuple(d for d in agent.gpu_in_use if d not in devices),
            )
        )
    return out


def earliest_start(
    request: PlacementRequest,
    agents: Sequence[Agent],
    running: Sequence[Running],
    now: float,
) -> float | None:
    """When a session asking ``request`` could start at the earliest (see the module's
    docstring); None when no end of a running session gives it room."""
    ends = sorted({r.ends_at for r in running if r.ends_at is not None and r.ends_at > now})
    for at in (now, *ends):
        try:
            place(request, freed(agents, running, at))
        except Pending:
            continue
        return at
    return None


def may_backfill(
    lifetime_s: float | None, head_start: float | None, now: float, margin_s: float = 0.0
) -> bool:
    """Whether a session of this lifetime may start now ahead of a blocked session whose
    earliest start is ``head_start``."""
    if lifetime_s is None or lifetime_s <= 0 or head_start is None:
        return False
    return now + float(lifetime_s) + float(margin_s) <= head_start


def why_not(
    lifetime_s: float | None,
    ahead: Mapping[str, float | None],
    now: float,
    margin_s: float = 0.0,
) -> str:
    """Why a session of this lifetime may not start now ahead of the blocked sessions
    ``ahead`` (name -> earliest start, oldest first); "" when it may (:func:`may_backfill`
    for each of them). What the pass decides and what explain says, in one place."""
    if not ahead:
        return "no waiting session ahead of it holds the agents it needs"
    if lifetime_s is None or lifetime_s <= 0:
        return (
            "it has no lifetime (nor a longest one from its owner's policy), so it never "
            "starts ahead of others"
        )
    ends_in = float(lifetime_s) + float(margin_s)
    for name, start in ahead.items():
        if start is None:
            return (
                f"the earliest start of {name} is unknown (a session in its way runs "
                f"without a lifetime)"
            )
        if not may_backfill(lifetime_s, start, now, margin_s):
            return (
                f"it would end in {ends_in:.0f} s (its lifetime and a {margin_s:.0f} s "
                f"margin), after {name} could start, in {max(0.0, start - now):.0f} s"
            )
    return ""
