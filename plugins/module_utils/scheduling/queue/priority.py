"""The queue's priority (docs/placement.md, "Priority"): a weighted sum of factors, each
between 0 and 1, as Slurm's multifactor priority has it:

    priority = weight_age * age + weight_fairshare * fairshare + weight_priority * explicit

- ``age``: how long the session has waited, ``min(1, waited / age_max_s)``;
- ``fairshare``: ``2 ** -(used / share)``, where ``used`` is the owner's decayed usage over
  the larger of everyone's and what the cluster could have given over the decay, and
  ``share`` the owner's share over everyone's (every owner with usage or a queued
  session; a policy's ``share``, default 1). An owner who used nothing gets 1, one whose
  use equals their share 0.5, one far above it close to 0;
- ``explicit``: the owner's policy ``priority`` (0-100) over 100.

Within a resource group the queue goes by priority in whole points, highest first; equal
points keep submission order, and a gang starting again (``head``) stays first. With one owner the
fair-share and explicit factors are the same for every session, so the order is the
submission order (FIFO) whatever the weights.

**Usage** is charged in *units*: seconds times ``cpu + mem_gib * mem_weight + gpu *
gpu_weight`` (:class:`Rates`). It decays with a half-life: a unit used ``t`` seconds ago
counts ``2 ** (-t / half_life_s)``. An owner's record is ``{"units": U, "at": T}``, U
decayed to T. A running session's usage is the integral of its rate under the decay,
``rate * h / ln 2 * (1 - 2 ** (-elapsed / h))``, so charging a session at its end with the
same integral never counts it twice. Pure: no Ansible, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DAY_S = 86400.0
# Records whose decayed units fall below this are dropped when the usage is saved: the
# usage record stays bounded by the owners active within a few dozen half-lives.
NEGLIGIBLE_UNITS = 1e-3


@dataclass(frozen=True)
class Weights:
    """The factors' weights, the age at which the age factor is 1, and the half-life."""

    age: float = 1000.0
    fairshare: float = 1000.0
    priority: float = 1000.0
    age_max_s: float = 7 * DAY_S
    half_life_s: float = 7 * DAY_S


@dataclass(frozen=True)
class Rates:
    """What one second of a session costs in units, per CPU, GiB of memory and GPU."""

    cpu: float = 1.0
    mem_gib: float = 0.25
    gpu: float = 10.0

    def rate(self, cpu: float, mem_bytes: float, gpu: float) -> float:
        return cpu * self.cpu + mem_bytes / 2**30 * self.mem_gib + gpu * self.gpu


@dataclass(frozen=True)
class Factors:
    """One session's factors (each 0..1) and the priority they give."""

    age: float
    fairshare: float
    explicit: float
    priority: float
    used: float = 0.0  # the owner's decayed usage, in units
    share: float = 0.0  # the owner's share of the cluster, 0..1


@dataclass
class Usage:
    """Every owner's decayed usage at ``now``: ended sessions' records plus running ones."""

    units: dict[str, float] = field(default_factory=dict)

    def total(self) -> float:
        return sum(self.units.values())


def decayed(units: float, since: float, now: float, half_life_s: float) -> float:
    """``units`` recorded at ``since``, as they count at ``now``."""
    return float(units) * 2.0 ** (-max(0.0, now - since) / half_life_s)


def accrued(rate: float, started: float, now: float, half_life_s: float) -> float:
    """What a session using ``rate`` units a second since ``started`` has used, decayed to
    ``now``: the integral of ``rate * 2 ** (-(now - t) / h)`` from ``started`` to ``now``."""
    elapsed = max(0.0, now - started)
    return rate * half_life_s / math.log(2) * (1.0 - 2.0 ** (-elapsed / half_life_s))


def charge(
    records: Mapping[str, Mapping[str, float]],
    owner: str,
    units: float,
    now: float,
    half_life_s: float,
) -> dict[str, dict[str, float]]:
    """The records with ``units`` (already decayed to ``now``) added to ``owner``'s, every
    record decayed to ``now``, and negligible ones dropped."""
    out: dict[str, dict[str, float]] = {}
    for name, record in records.items():
        left = decayed(record.get("units", 0.0), record.get("at", now), now, half_life_s)
        out[name] = {"units": left, "at": now}
    mine = out.setdefault(owner, {"units": 0.0, "at": now})
    mine["units"] += max(0.0, float(units))
    return {n: r for n, r in out.items() if r["units"] >= NEGLIGIBLE_UNITS}


def usage(
    records: Mapping[str, Mapping[str, float]],
    running: Iterable[tuple[str, float, float]],
    now: float,
    half_life_s: float,
) -> Usage:
    """Every owner's usage at ``now``: their records decayed, plus what each running
    session (owner, rate, started) has accrued."""
    found = Usage()
    for owner, record in records.items():
        units = decayed(record.get("units", 0.0), record.get("at", now), now, half_life_s)
        found.units[owner] = found.units.get(owner, 0.0) + units
    for owner, rate, started in running:
        found.units[owner] = found.units.get(owner, 0.0) + accrued(rate, started, now, half_life_s)
    return found


def fairshare(used: float, total_used: float, share: float, total_share: float) -> float:
    """``2 ** -(used/total_used) / (share/total_share)``: 1 for no use, 0.5 at the share."""
    if used <= 0 or total_used <= 0:
        return 1.0
    if share <= 0 or total_share <= 0:
        return 0.0
    return 2.0 ** (-(used / total_used) / (share / total_share))


def factors(
    waited_s: float,
    owner: str,
    found: Usage,
    shares: Mapping[str, float],
    explicit: float = 0.0,
    weights: Weights = Weights(),
    capacity_rate: float = 0.0,
) -> Factors:
    """One queued session's factors: it has waited ``waited_s``; ``shares``: every owner
    that counts (with usage or queued) and their share; ``explicit``: 0..100;
    ``capacity_rate``: the units a second the cluster's agents offer (0: unknown). Usage
    is measured against the larger of everyone's and what the cluster could have given
    over the decay (``capacity_rate * h / ln 2``), so that a trace of old use, or an
    owner alone on an idle cluster, is not counted as the whole cluster."""
    age = min(1.0, max(0.0, waited_s) / weights.age_max_s) if weights.age_max_s > 0 else 1.0
    total_share = sum(max(0.0, s) for s in shares.values())
    share = max(0.0, shares.get(owner, 1.0))
    used = found.units.get(owner, 0.0)
    window = max(0.0, capacity_rate) * weights.half_life_s / math.log(2)
    fair = fairshare(used, max(found.total(), window), share, total_share or share)
    explicit_factor = min(1.0, max(0.0, float(explicit) / 100.0))
    value = weights.age * age + weights.fairshare * fair + weights.priority * explicit_factor
    return Factors(
        age=age,
        fairshare=fair,
        explicit=explicit_factor,
        priority=value,
        used=used,
        share=share / total_share if total_share else 0.0,
    )


def points(priority: float) -> int:
    """A priority rounded to whole points, as the queue compares them (Slurm's are integers too):
    differences below a point (a minute of age, a trace of old usage) do not reorder."""
    return math.floor(priority + 0.5)


def order_key(priority: float, head: bool, submitted_at: float, seq: int, name: str) -> Any:
    """The sort key within a resource group: a gang starting again first, then the
    highest priority in whole points, then submission order."""
    return (0 if head else 1, -points(priority), submitted_at, seq, name)
