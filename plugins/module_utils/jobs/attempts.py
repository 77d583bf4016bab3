"""The attempts of a batch session that restarted (docs/sessions.md, "Restarts"): where
each one's output is, from what the session ledger says of the session. Pure.

A session that may restart has an ``attempt`` (0 for the first run of its gang, K after
K restarts) on its ledger entry, its queue entry and its end record, and the ends of the
earlier attempts in ``attempts`` (each with ``members``: host -> agent, where that
attempt's output was kept).

    logs_where(read, host, attempt)   the filter bai_logs_where: agent, session_id, attempt
    kept_name(host, attempt)          the file a member's kept output is in
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional


def kept_name(host: str, attempt: Optional[int] = None) -> str:
    """The file, in the session's log folder, that holds ``host``'s kept output of
    ``attempt``: HOST.log for a session's first (or only) run, HOST.attempt-K.log for its
    K-th restart."""
    return f"{host}.log" if not attempt else f"{host}.attempt-{int(attempt)}.log"


def logs_where(read: Mapping[str, Any], host: str, attempt: Any = None) -> dict[str, Any]:
    """The filter bai_logs_where: from bai_session_ledger's read of one session, where
    ``host``'s output of ``attempt`` (default: the newest that ran) is - ``agent`` ("" when
    the ledger knows no such session, host or attempt), ``session_id``, ``attempt`` (None
    for a session that does not restart) and ``attempts`` (how many ran or run)."""
    entry = read.get("reservation") or {}
    queued = read.get("queued") or {}
    ended = (read.get("ended") or [{}])[0]
    source = entry or queued or ended
    if not source:
        return {"agent": "", "session_id": "", "attempt": None, "attempts": 0}
    earlier = {int(a.get("attempt") or 0): a for a in source.get("attempts") or ()}
    current = source.get("attempt")
    runs: dict[int, Mapping[str, str]] = {k: a.get("members") or {} for k, a in earlier.items()}
    if entry:
        runs[int(current or 0)] = {k["host"]: k["agent"] for k in entry.get("kernels") or ()}
    elif ended and not queued:
        runs[int(current or 0)] = ended.get("members") or {}
    if not runs:
        return {"agent": "", "session_id": "", "attempt": None, "attempts": 0}
    chosen = max(runs) if attempt is None or attempt == "" else int(attempt)
    restartable = current is not None or bool(earlier)
    return {
        "agent": str((runs.get(chosen) or {}).get(host) or ""),
        "session_id": str(source.get("session_id") or ""),
        "attempt": chosen if restartable else None,
        "attempts": len(runs),
    }
