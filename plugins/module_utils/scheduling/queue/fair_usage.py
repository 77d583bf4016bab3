"""Each owner's usage, recorded in the session ledger (``Ledger.usage``) for the queue's
fair share (priority.py; docs/placement.md, "Priority").

A session uses units at a rate (priority.Rates: its containers' CPUs, GiB of memory and
GPUs) from the moment its reservation is confirmed (``ready_at``) until it is released. While
it runs, its usage is computed from its reservation (:func:`running`); when it ends - a
destroy releases or forsakes it, or its gang is queued again to restart - what it used,
decayed to that moment, is added to its owner's record (:func:`charge_end`), and the
reservation, and with it the running part, goes in the same compare-and-swap. So a
session is never counted twice, nor missed between the two.

``Ledger.usage``: owner -> ``{"units": U, "at": T}``, U decayed to T (sessions without an
owner count under ""). Every charge decays every record to now and drops those below
priority.NEGLIGIBLE_UNITS, so the record holds only owners active within a few dozen
half-lives. What a ledger rebuilt from the containers' labels (reconcile) loses: the
records, since the labels say nothing of sessions that ended; running sessions count again
from their rebuilt reservations.

Pure: no Ansible, no I/O.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import priority

RATES = priority.Rates()
HALF_LIFE_S = priority.Weights().half_life_s


def rate_of(entry: Reservation, rates: priority.Rates = RATES) -> float:
    """Units a second of a reservation: its containers' CPUs, memory and GPUs."""
    return sum(
        rates.rate(float(k.cpu or 0), float(k.mem or 0), float(k.gpu or 0))
        for k in entry.kernels or ()
    )


def _started(entry: Reservation) -> float | None:
    """When a reservation began to count: its confirmation (None while creating)."""
    ready = entry.ready_at
    return None if ready is None else float(ready)


def running(ledger: Ledger, rates: priority.Rates = RATES) -> list[tuple[str, float, float]]:
    """(owner, rate, started) of every confirmed reservation."""
    out = []
    for entry in ledger.sessions.values():
        started = _started(entry)
        if started is not None:
            out.append((str(entry.owner or ""), rate_of(entry, rates), started))
    return out


def current(
    ledger: Ledger,
    now: float,
    half_life_s: float = HALF_LIFE_S,
    rates: priority.Rates = RATES,
) -> priority.Usage:
    """Every owner's usage at ``now``: the records decayed, plus what runs."""
    return priority.usage(ledger.usage or {}, running(ledger, rates), now, half_life_s)


def charge_end(
    ledger: Ledger,
    entry: Reservation,
    now: float,
    half_life_s: float = HALF_LIFE_S,
    rates: priority.Rates = RATES,
) -> float:
    """Add what the reservation ``entry`` (ending now) used to its owner's record; the
    units charged (0 for one never confirmed: it ran nothing)."""
    started = _started(entry)
    if started is None:
        return 0.0
    units = priority.accrued(rate_of(entry, rates), started, now, half_life_s)
    owner = str(entry.owner or "")
    ledger.usage = priority.charge(ledger.usage or {}, owner, units, now, half_life_s)
    return units
