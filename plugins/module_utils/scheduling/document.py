"""The reservation ledger's document (docs/placement.md): its format, its states, its text.

Docker labels say what runs; they cannot say what another create, started a moment ago,
is about to start. So placement and the reservation it makes happen under one lock, in
one module run on one host of the cluster (the ledger host: the Swarm manager, else the
first agent), and the ledger on that host records, per session name, what each of its
containers was given: agent, CPU, memory, GPU devices.

The document is one JSON object of version :data:`VERSION`:

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
  ``queue_seq``: sessions waiting their turn (session_queue.py); ``aliases``: ledgers this
  one adopted; ``clock``: the ledger's time at its last write (ledger_store.py).

A missing or damaged ledger is never read as an empty ledger (:func:`loads`):
reconcile rebuilds a lost one from the containers' labels (:data:`REBUILD_HINT`).

Pure: the store (ledger_store.py) does the file or the swarm object, and the lock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import LedgerError

VERSION = 1
CREATING = "creating"
READY = "ready"
# A session's containers exist before its reservation is marked ready, so a read of an
# agent taken after that moment shows them. Both are timed by the ledger host's clock
# alone (on_ledger_clock), never an agent's; this margin absorbs steps of that one clock.
# Within it a ready session counts by its reservation.
STALE_MARGIN_S = 5.0


REBUILD_HINT = (
    "rebuild it from the agents' labels: bai-cluster session reconcile "
    "(ansible-playbook playbooks/session_reconcile.yml)"
)


def empty() -> dict[str, Any]:
    return {"version": VERSION, "sessions": {}, "agents": {}}


def loads(text: str) -> dict[str, Any]:
    """Parse the ledger file's text. Empty text is a damaged ledger (a truncated file), never
    an empty one: reservations in it would vanish."""
    if not text.strip():
        raise LedgerError("the ledger file is empty (truncated?)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LedgerError(f"the ledger is not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("sessions"), dict):
        raise LedgerError("the ledger has no 'sessions' mapping")
    if data.get("version") != VERSION:
        raise LedgerError(f"ledger version {data.get('version')!r}, this toolkit reads {VERSION}")
    return data


def dumps(ledger: Mapping[str, Any]) -> str:
    return json.dumps(ledger, indent=1, sort_keys=True) + "\n"


def dumps_compact(ledger: Mapping[str, Any]) -> str:
    """The ledger in as few bytes as JSON allows (the swarm store's label)."""
    return json.dumps(ledger, separators=(",", ":"), sort_keys=True)


def settled(entry: Mapping[str, Any]) -> float:
    """When every read of the agents surely shows a ready session."""
    return float(entry.get("ready_at") or 0) + STALE_MARGIN_S


def clock_text(epoch: Any) -> str:
    """An epoch as the time of day a message shows ("?" when there is none)."""
    try:
        return time.strftime("%H:%M:%S UTC", time.gmtime(float(epoch)))
    except (TypeError, ValueError):
        return "?"
