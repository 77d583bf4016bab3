"""How a batch session ended (:class:`JobEnd`), as bai_session_ledger's ``ended`` option
gives it: jobs/job.combine's result, shaped by the bai_job_end filter.

The ledger reads it once (steps/by_state.py). What its restart policy makes of it
(restart_policy.restart_cause), a preemption's turn of a victim's end
(queue/preemption.victim_end), an attempt's record (steps/restarts.py) and the history's
record (ledger/history.py) read its fields. Its values are kept as given, never
converted, so the records the ledger writes of it are the same text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

# What the ledger records of an end, in this order (ledger/history.py, steps/restarts.py).
END_KEYS = ("state", "exit_code", "signal", "failed", "started", "ended", "reason", "members")


@dataclass(frozen=True)
class JobEnd:
    """A batch session's end: its state (succeeded, failed, timeout, cancelled, lost,
    preempted...), the command's exit code or signal, the member that failed first
    (``failed``: host, agent, exit_code, signal, oom_killed, why), when it started and
    ended, why, and each member's agent (``members``: host -> agent). ``final``: a
    destroy forced by hand, which never restarts it. ``attempt`` and ``attempts``: for
    a gang that restarted, its last attempt's number and the earlier attempts' records."""

    state: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    failed: Mapping[str, Any] | None = None
    started: float | None = None
    ended: float | None = None
    reason: str | None = None
    members: Mapping[str, str] | None = None
    final: bool = False
    attempt: int | None = None
    attempts: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> JobEnd | None:
        """The end of the ``ended`` option (None stays None)."""
        if not raw:
            return None
        get = raw.get
        return cls(
            state=get("state"),
            exit_code=get("exit_code"),
            signal=get("signal"),
            failed=get("failed"),
            started=get("started"),
            ended=get("ended"),
            reason=get("reason"),
            members=get("members"),
            final=bool(get("final")),
            attempt=get("attempt"),
            attempts=tuple(get("attempts") or ()),
        )

    def picked(self, keys: Sequence[str] = END_KEYS) -> dict[str, Any]:
        """``keys`` (of END_KEYS) and their values, in that order, for a record."""
        return {key: getattr(self, key) for key in keys}

    def preempted(self, reason: str) -> JobEnd:
        """This end, turned into ``preempted`` for ``reason``."""
        return replace(self, state="preempted", reason=reason)

    def with_attempts(self, attempt: int, attempts: Sequence[Mapping[str, Any]]) -> JobEnd:
        """This end as attempt number ``attempt`` after ``attempts`` (their records)."""
        return replace(self, attempt=attempt, attempts=tuple(attempts))

    def failed_member(self, key: str) -> Any:
        """``key`` of the member that failed first (None when none failed, or unknown)."""
        return (self.failed or {}).get(key)
