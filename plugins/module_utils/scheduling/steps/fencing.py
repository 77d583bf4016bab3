"""A batch session's gang with a member on an agent that does not answer (docs/sessions.md,
"Restarts"): when may it start again, and what of its earlier attempts is left.

Nothing can remove the containers on an agent that does not answer, so a restart there is
safe only once they have stopped by themselves. They do: every member of a batch session
checks main1 every POLL_S seconds and stops after MISSES misses, and main1 stops the
command as soon as a member is gone for as long (module_utils/jobs/job.py). So once the
members on the agents that answer have all stopped, the ones on the agent that does not
have stopped too within that bound, if they run at all. :func:`fenced` waits FENCE_S after
the last of them stopped, as the engines that answer tell it, which is several times the
bound: a partitioned engine's DNS may answer for main1 for a while after it is gone.

A restart keeps the session id, so the earlier attempt's containers left on such an agent
carry the same id: their attempt label is lower than the session's. :func:`stale_rows`
finds them in an agent's read, for reconcile to remove once the agent answers again.

    FENCE_S
    stopped_for(status)               seconds a container has been stopped at least
    fenced(ledger, fresh, unread)     the sessions whose gang may start again without them
    fence_in(ledger, fresh, unread)   seconds until the next one's fence is over
    current_attempts(ledger)          session id -> the attempt that counts now
    stale_rows(rows, attempts)        containers of an earlier attempt of a session
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_RESTART_COUNT,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    READY,
    Ledger,
)

# Seconds after the last member that answers stopped (the gang check's own bound is
# POLL_S x (MISSES + 1) = 8 s).
FENCE_S = 30
_STOPPED = ("exited", "dead")
# Docker's "Exited (3) 12 seconds ago" (units.HumanDuration), as a lower bound in seconds.
_AGO = re.compile(
    r"(?:(\d+)|an?|about an?|less than an?)\s*(second|minute|hour|day|week|month|year)"
)
_UNIT_S = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 604800,
    "month": 2592000,
    "year": 31536000,
}


def stopped_for(status: Any) -> float | None:
    """At least how many seconds a container whose ``docker ps`` status is ``status``
    ("Exited (3) 12 seconds ago", "Exited (0) About a minute ago") has been stopped, by
    its own engine's clock; None when the status does not say."""
    text = str(status or "").lower()
    if not text.startswith("exited") and not text.startswith("dead"):
        return None
    if "less than a second" in text:
        return 0.0
    found = _AGO.search(text.split(")", 1)[-1])
    if found is None:
        return None
    count = int(found.group(1)) if found.group(1) else 1
    return float(count * _UNIT_S[found.group(2)])


def fenced(
    ledger: Ledger, fresh: Mapping[str, AgentRead], unread: Sequence[str]
) -> list[dict[str, Any]]:
    """The running batch sessions that may restart (restarts left) and have a member on an
    agent of ``unread`` (it did not answer), whose members on the agents that answered
    (``fresh``: this run's reads by agent) have all stopped, or are gone, for FENCE_S at
    least: the gang is over. Each as {name, session_id, agents (those not answering)}."""
    return [
        {"name": name, "session_id": sid, "agents": lost}
        for name, sid, lost, waited in _candidates(ledger, fresh, unread)
        if waited >= FENCE_S
    ]


def fence_in(ledger: Ledger, fresh: Mapping[str, AgentRead], unread: Sequence[str]) -> float | None:
    """Seconds until the next such session's fence is over (its members that answer have
    stopped, not yet for FENCE_S), for a pass that waits it out; None when none is close."""
    left = [FENCE_S - w for *_rest, w in _candidates(ledger, fresh, unread) if w < FENCE_S]
    return min(left) if left else None


def _candidates(
    ledger: Ledger, fresh: Mapping[str, AgentRead], unread: Sequence[str]
) -> list[tuple[str, str, list[str], float]]:
    """(name, session id, agents not answering, seconds its members that answer have been
    stopped at least) of each restartable batch session with restarts left, an agent of
    ``unread`` and every member on the agents that answered stopped or gone."""
    away = set(unread)
    out = []
    for name, entry in sorted(ledger.sessions.items()):
        spec = entry.spec or {}
        if entry.state != READY or int(entry.attempt or 0) >= int(spec.get("restarts") or 0):
            continue
        agents = entry.agents
        lost, answered = sorted(agents & away), agents - away
        if not lost or not answered or not answered <= set(fresh):
            continue  # nothing that answers can show the gang stopped
        sid = entry.session_id
        rows = [
            row
            for agent in answered
            for row in fresh[agent].containers
            if row.label(LABEL_SESSION_ID) == sid
        ]
        if any(row.state not in _STOPPED for row in rows):
            continue
        waited = [stopped_for(row.status) for row in rows]
        known = [w for w in waited if w is not None]
        if len(known) == len(waited):
            out.append((name, sid, lost, min(known, default=float(FENCE_S))))
    return out


def current_attempts(ledger: Ledger) -> dict[str, int]:
    """Session id -> the attempt that counts now (reserved, or waiting to start again),
    for the sessions that restarted."""
    found = {str(e.session_id): int(e.attempt or 0) for e in ledger.sessions.values() if e.attempt}
    for queued in (ledger.queue or {}).values():
        if queued.session_id and queued.attempt:
            found[str(queued.session_id)] = int(queued.attempt)
    return found


def stale_rows(rows: Iterable[ContainerRow], attempts: Mapping[str, int]) -> list[ContainerRow]:
    """The containers among ``rows`` of an earlier attempt of a session that restarted
    (their attempt label is lower than the one that counts now)."""
    stale = []
    for row in rows:
        now = attempts.get(str(row.label(LABEL_SESSION_ID)))
        count = str(row.label(LABEL_RESTART_COUNT) or "0")
        if now and count.isdigit() and int(count) < now:
            stale.append(row)
    return stale
