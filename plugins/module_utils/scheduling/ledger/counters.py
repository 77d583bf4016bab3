"""The ledger's counters (``Ledger.counters``): what the scheduler did over time, for the
metrics (docs/metrics.md). Each transaction that does something countable adds to them
in the same write, so a count is never ahead of or behind what the ledger records.

    ``ends``      "TYPE/RESULT" -> sessions that ended so (batch: job results; an
                  interactive session's destroy is ``destroyed``, a queued one's
                  cancellation ``cancelled``)
    ``restarts``  cause (restart_policy.RESTART_CAUSES) -> gangs queued to start again
    ``wait``      resource group -> the histogram of the time sessions waited before they
                  were placed: ``buckets`` (counts per :data:`WAIT_BUCKETS_S` bound, not
                  cumulative, then the overflow), ``sum``, ``count``
    ``retries``   ledger writes that met a newer version and started again (swarm store)
    ``schedule``  the last scheduler pass that found sessions queued: ``at``, ``seconds``
                  (what it took to decide), and ``passes`` in all
    ``reconcile`` the last reconcile: ``at``, and ``passes`` in all

The counters are a :class:`records.Counters`, changed only here. Counters only grow. A
ledger rebuilt from the containers' labels starts them at zero again, which Prometheus
reads as a counter reset. Pure.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Counters,
    QueueEntry,
)

# Upper bounds (seconds) of the queue wait histogram's buckets: from a start with no wait
# to a day in the queue.
WAIT_BUCKETS_S = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 14400, 43200, 86400)
# The end of an interactive session: a destroy (by its user, or its lifetime).
DESTROYED = "destroyed"
CANCELLED = "cancelled"


def _counters(ledger: Ledger) -> Counters:
    if ledger.counters is None:
        ledger.counters = Counters.from_dict({})  # nothing counted yet: no key written
    return ledger.counters


def _plus(table: dict[str, float], key: str) -> dict[str, float]:
    table[key] = table.get(key, 0) + 1
    return table


def count_end(ledger: Ledger, kind: str, result: str) -> None:
    """A session of type ``kind`` (batch, interactive) ended with ``result``."""
    counters = _counters(ledger)
    counters.ends = _plus(counters.ends, f"{kind}/{result}")


def count_restart(ledger: Ledger, cause: str) -> None:
    counters = _counters(ledger)
    counters.restarts = _plus(counters.restarts, cause)


def count_retries(ledger: Ledger, retries: int) -> None:
    """``retries`` writes started again before the one that writes this ledger."""
    if retries > 0:
        counters = _counters(ledger)
        counters.retries = (counters.retries or 0) + retries


def observe_wait(ledger: Ledger, group: str, waited_s: float) -> None:
    """A session of resource group ``group`` was placed after ``waited_s`` in the queue
    (0 for one placed when it was submitted)."""
    counters = _counters(ledger)
    waits = counters.wait
    hist = waits.setdefault(group, {"buckets": [0] * (len(WAIT_BUCKETS_S) + 1), "sum": 0.0})
    buckets = list(hist.get("buckets") or ())
    buckets += [0] * (len(WAIT_BUCKETS_S) + 1 - len(buckets))
    buckets[bisect_left(WAIT_BUCKETS_S, max(waited_s, 0.0))] += 1
    hist.update(
        buckets=buckets,
        sum=round(float(hist.get("sum") or 0) + max(waited_s, 0.0), 3),
        count=int(hist.get("count") or 0) + 1,
    )
    counters.wait = waits


def note_pass(ledger: Ledger, which: str, now: float, seconds: float | None = None) -> None:
    """A scheduler pass (``schedule``) or a reconcile (``reconcile``) ran at ``now``."""
    counters = _counters(ledger)
    record = counters.schedule if which == "schedule" else counters.reconcile
    record.update(at=now, passes=int(record.get("passes") or 0) + 1)
    if seconds is not None:
        record["seconds"] = round(seconds, 6)
    if which == "schedule":
        counters.schedule = record
    else:
        counters.reconcile = record


def queued_since(entry: QueueEntry) -> float:
    """When a queue entry's current wait began: its submission, or, for a gang queued to
    start again, the end of its last attempt."""
    attempts = entry.attempts or ()
    if entry.attempt and attempts:
        return float(attempts[-1].removed_at or entry.submitted_at)
    return float(entry.submitted_at)


def read(ledger: Ledger) -> dict[str, Any]:
    """The counters as the metrics read them (every key there, empty when never counted)."""
    found = ledger.counters or Counters()
    return {
        "ends": dict(found.ends or {}),
        "restarts": dict(found.restarts or {}),
        "wait": dict(found.wait or {}),
        "wait_buckets_s": list(WAIT_BUCKETS_S),
        "retries": int(found.retries or 0),
        "schedule": dict(found.schedule or {}),
        "reconcile": dict(found.reconcile or {}),
    }
