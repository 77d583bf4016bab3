"""How batch sessions ended (the ledger's ``ended``; module_utils/jobs/job.py): what
`session show` and `session logs` find once a batch session is gone."""

from __future__ import annotations

from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    Ended,
    Ledger,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import JobEnd

# The ends the ledger remembers (the newest): what `session show` and `session logs` find
# once a batch session is gone. About 400 bytes each in the swarm store.
MAX_ENDED = 200


def record_end(
    ledger: Ledger,
    name: str,
    session_id: str,
    end: JobEnd,
    now: float,
    owner: str = "",
) -> None:
    """Remember how batch session ``name`` (``session_id``) of ``owner`` ended - ``end``:
    its state, exit code, the member that failed, when it started and ended, each
    member's agent (where its output is kept) and, for a gang that restarted, its last
    attempt's number and the ends of the earlier ones - at ``now``, keeping only the
    newest MAX_ENDED."""
    if ledger.ended is None:
        ledger.ended = {}
    ended = ledger.ended
    ended[session_id] = Ended.from_dict(
        {
            "name": name,
            "session_id": session_id,
            "removed_at": now,
            "owner": owner,
            **end.picked(),
            **({"attempt": end.attempt} if end.attempt else {}),
            **({"attempts": list(end.attempts)} if end.attempts else {}),
        }
    )
    for old in sorted(ended, key=lambda sid: float(ended[sid].removed_at))[:-MAX_ENDED]:
        del ended[old]


def ended_as(ledger: Ledger, name: str) -> list[Ended]:
    """The ended batch sessions called ``name`` the ledger remembers, newest first."""
    found = [e for e in (ledger.ended or {}).values() if e.name == name]
    return sorted(found, key=lambda e: e.removed_at, reverse=True)


def ends_of(ledger: Ledger, name: str) -> list[dict[str, Any]]:
    """:func:`ended_as`'s records as JSON objects (the module's result)."""
    return [e.to_dict() for e in ended_as(ledger, name)]
