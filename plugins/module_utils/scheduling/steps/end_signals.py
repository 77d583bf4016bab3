"""The warning before a session's lifetime ends (``session_end_signal``, Slurm's
``--signal SIG@SECONDS``; docs/sessions.md, "Lifetimes"): at a reconcile, which running
sessions' signal is due, each marked sent in the ledger in the same transaction, so it
goes out once whoever runs the next pass.

    EARLY_S                    how much sooner than asked a pass sends it
    due(ledger, now, early_s)  one row per agent of each session whose signal is due
    warnings(sessions, names, cap_s)  a forced drain's: the rows and the longest lead
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    Ledger,
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.reservations import (
    time_left,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.signal_names import (
    end_signal_parts,
)

# The housekeeping pass starts 60 s after the previous one ended, and a pass takes some
# seconds: a signal is sent at the first pass that finds at most SECONDS + EARLY_S left,
# so it comes no later than asked while the passes run on time, and at most EARLY_S
# sooner (Slurm's own --signal may come up to 60 s early, for the same reason).
EARLY_S = 90


def due(ledger: Ledger, now: float, early_s: float = EARLY_S) -> list[dict[str, Any]]:
    """The running sessions whose end signal is due at ``now`` (the ledger's clock): one
    row per agent (``agent``, ``session``, ``session_id``, ``signal``), and each such
    session marked ``end_signal_at``. A session whose lifetime is already up gets none:
    its stop's SIGTERM is what comes now."""
    rows: list[dict[str, Any]] = []
    for name, entry in sorted(ledger.sessions.items()):
        text = entry.end_signal
        if not text or entry.end_signal_at is not None:
            continue
        left = time_left(entry, now)
        signal, lead = end_signal_parts(str(text))
        if not left or left > lead + early_s:
            continue
        entry.signalled(now)
        rows.extend(_rows(name, entry, signal))
    return rows


def read_warnings(sessions: Mapping[str, Any], names: Iterable[str], cap_s: Any) -> dict[str, Any]:
    """:func:`warnings` over a ledger read's ``sessions`` (JSON objects): the filter
    bai_end_warnings."""
    return warnings({k: Reservation.from_dict(v) for k, v in sessions.items()}, names, cap_s)


def warnings(
    sessions: Mapping[str, Reservation], names: Iterable[str], cap_s: Any
) -> dict[str, Any]:
    """What a forced drain (the filter bai_end_warnings) sends before it stops sessions
    ``names`` (the ledger's ``sessions``): ``rows`` as :func:`due` gives them, for each
    that asked for an end signal, and ``lead_s``, the longest lead among them, at most
    ``cap_s`` (the drain's own timeout); 0 when none asked."""
    rows: list[dict[str, Any]] = []
    lead_s = 0
    for name in sorted(set(names)):
        entry = sessions.get(name)
        if entry is None or not entry.end_signal or not entry.kernels:
            continue
        signal, lead = end_signal_parts(str(entry.end_signal))
        rows.extend(_rows(name, entry, signal))
        lead_s = max(lead_s, lead)
    return {"rows": rows, "lead_s": min(lead_s, int(float(cap_s)))}


def _rows(name: str, entry: Reservation, signal: str) -> list[dict[str, Any]]:
    return [
        {"agent": agent, "session": name, "session_id": entry.session_id, "signal": signal}
        for agent in sorted(entry.agents)
    ]
