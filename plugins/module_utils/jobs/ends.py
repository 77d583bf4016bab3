"""How a batch session ended when the toolkit ended it (docs/sessions.md, "Results"), told
apart from the command failing, and the exit code ``bai-cluster session run`` gives each
end.

    TIMEOUT, PREEMPTED             the toolkit's ends (with job.LOST: an agent did not answer)
    toolkit_end(job, name, ...)    the record destroy keeps for a session it stopped, or None
    EXIT_CODES, exit_status(...)   the exit code of each end
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.jobs.job import (
    CANCELLED,
    FAILED,
    LOST,
    PREEMPTED,
    SUCCEEDED,
    TIMEOUT,
)

# session run's exit code per end. The command's own code when it failed (1 when it has
# none: a member died); the others are fixed, so that a script can tell a lifetime (124,
# as GNU timeout), a drain (75, EX_TEMPFAIL: running it again may work) and an agent that
# did not answer (69, EX_UNAVAILABLE) from the command's own failure.
EXIT_CODES = {SUCCEEDED: 0, CANCELLED: 130, TIMEOUT: 124, PREEMPTED: 75, LOST: 69}
REASONS = {
    TIMEOUT: "its lifetime (session_lifetime_s) was up",
    PREEMPTED: "the toolkit stopped it",
}


def exit_status(state: str, exit_code: Optional[int]) -> int:
    """The exit code of ``session run`` for a command that ended in ``state``."""
    if state in EXIT_CODES:
        return EXIT_CODES[state]
    if state == FAILED and exit_code and 0 < exit_code < 256:
        return int(exit_code)
    return 1


def toolkit_end(
    job: Optional[Mapping[str, Any]],
    name: str,
    timed_out: Iterable[str] = (),
    preempted: Iterable[str] = (),
    reason: str = "",
) -> Optional[dict[str, Any]]:
    """The end destroy records for batch session ``name`` (the filter bai_job_end): its
    job as the removal read it, made ``timeout`` when its lifetime was up
    (``timed_out``), or ``preempted`` (``reason``) when a drain or a preemption stopped
    it - unless the command had ended by itself first (succeeded, failed) or an agent
    did not answer (lost): such an end is its own (the ledger makes a preemption's victim
    that ended after its warning preempted all the same: scheduling/queue/preemption.py).
    None for an interactive session, or a batch session whose end is not known yet."""
    if not job:
        return None
    state = job.get("state")
    own = state in (SUCCEEDED, FAILED, LOST)
    if not own and name in set(timed_out):
        return {**job, "state": TIMEOUT, "terminal": True, "reason": REASONS[TIMEOUT]}
    if not own and name in set(preempted):
        return {**job, "state": PREEMPTED, "terminal": True, "reason": reason or REASONS[PREEMPTED]}
    return dict(job) if job.get("terminal") else None
