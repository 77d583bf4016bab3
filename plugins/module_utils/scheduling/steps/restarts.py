"""Gang restarts in the session ledger (docs/sessions.md, "Restarts"): a batch session that
may restart (``session_restarts``) keeps its request on its entry; when it ends in a way
its policy counts (session/restart_policy.py) with restarts left, its release puts it back
in the queue, at the head of its resource group, instead of forgetting it - or, stopped by
a preemption (preemption.py), as a new submission, so that what it made room for goes
first.

The whole gang is down by then: the release is the last step of a destroy, which removed
every member first (or, forced, forsook the part on agents that did not answer, whose
members stop themselves once main1 is gone: module_utils/jobs/job.py). So old and new
members never overlap. The next scheduler pass starts it through the normal path
(placement, admission, owners' limits) with the same session id; ``attempt`` counts the
restarts and lives on the entry and on every container's label, so neither a reconcile nor
a rebuild from the labels resets it.

    keep_policy(entry, spec, keys, queued)   a new reservation keeps what a restart needs
    restart(ledger, name, session_id, end, now) -> the queue entry, or None
    attempts_of(entry)                       the earlier attempts' ends, oldest first
    last_end(queued)                         a cancelled restart's end record, or None
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import WAIT_RESTART
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import queue as queue_
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import counters
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    Ledger,
    QueueEntry,
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.kept_reads import (
    forget_in_record,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import Attempt
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import END_KEYS, JobEnd
from ansible_collections.bai.cluster.plugins.module_utils.session.model import SessionSpec
from ansible_collections.bai.cluster.plugins.module_utils.session.restart_policy import (
    restart_cause,
)

# What the ledger keeps of each earlier attempt's end (about 300 bytes each; at most
# session_restarts of them, 100).
_ATTEMPT_KEYS = tuple(key for key in END_KEYS if key != "reason")


def keep_policy(
    entry: Reservation,
    spec: SessionSpec,
    authorized_keys: Sequence[str],
    queued: QueueEntry | None,
) -> None:
    """A reservation of a session that may restart keeps its request (``spec``) and the
    people's keys to place it again, and its attempt: 0, or the queue entry's when this
    is a restart."""
    if not spec.restarts:
        return
    entry.keep_for_restarts(
        spec,
        authorized_keys,
        int(queued.attempt or 0) if queued else 0,
        attempts_of(queued),
    )


def attempts_of(queued: QueueEntry | None) -> list[Attempt]:
    """The earlier attempts of a queued session's entry, oldest first."""
    return list((queued.attempts if queued else None) or ())


def restart(
    ledger: Ledger,
    name: str,
    session_id: str,
    end: JobEnd,
    now: float,
    left_on: Sequence[str] = (),
) -> QueueEntry | None:
    """Queue the gang of batch session ``name`` (``session_id``) again when its end
    ``end`` (job.combine's result) is one its policy restarts for and it has restarts
    left: its reservation is released and it waits at the head of its group, keeping its
    session id, its submission time and the ends of its attempts. ``left_on``: agents
    that did not answer, whose part stopped by itself (fencing.py): their kept reads
    keep counting it until reconcile removes it there. Returns the queue entry; None
    (nothing changed) when it does not restart."""
    entry = ledger.sessions.get(name)
    if entry is None or entry.session_id != session_id or not entry.spec:
        return None
    spec = entry.spec
    allowed = int(spec.get("restarts") or 0)
    attempt = int(entry.attempt or 0)
    cause, why = restart_cause(end, tuple(spec.get("restart_on") or ()))
    if not why or attempt >= allowed:
        return None
    # Stopped by a preemption: it queues again as a new submission, so the session it
    # made room for goes first (preemption.py).
    by = (entry.preempted_by or {}).get("session") if cause == "preempted" else None
    if by:
        why = f"preempted for {by}"
    record = {
        "attempt": attempt,
        **end.picked(_ATTEMPT_KEYS),
        # Where each member ran (its output is kept there), also those not heard from.
        "members": {
            **{str(k.host): str(k.agent) for k in entry.kernels or ()},
            **(end.members or {}),
        },
        "removed_at": now,
        "restarted_because": why,
        **({"left_on": sorted(left_on)} if left_on else {}),
    }
    seq = queue_.next_seq(ledger)
    ledger.queue_seq = seq
    raw: dict[str, Any] = {
        "name": name,
        "spec": dict(spec),
        "spec_hash": entry.spec_hash,
        "group": spec.get("resource_group") or "default",
        "owner": entry.owner or "",
        "submitted_at": now if by else entry.submitted_at or entry.reserved_at or now,
        "seq": seq,
        "head": not by,
        "reason": f"starting again ({attempt + 1} of {allowed} restarts): {why}",
        "wait": WAIT_RESTART,
        "session_id": session_id,
        "attempt": attempt + 1,
        "attempts": [*(a.to_dict() for a in entry.attempts or ()), record],
    }
    if entry.authorized_keys:
        raw["authorized_keys"] = list(entry.authorized_keys)
    del ledger.sessions[name]
    for agent, kept in (ledger.agents or {}).items():
        if agent not in left_on:
            forget_in_record(kept, session_id)
    queued = QueueEntry.from_dict(raw)
    queue_.put(ledger, queued)
    counters.count_restart(ledger, cause)
    return queued


def last_end(queued: QueueEntry) -> JobEnd | None:
    """A gang cancelled while it waited to start again (its queue entry): how its last
    attempt ended, with the ones before it, for the ledger's history; None for any other
    queued session."""
    earlier = attempts_of(queued)
    if not earlier or not queued.session_id:
        return None
    last = JobEnd.of(earlier[-1].to_dict()) or JobEnd()
    return replace(
        last,
        reason=f"{last.state}; cancelled before it started again",
        attempts=tuple(a.to_dict() for a in earlier[:-1]),
    )
