"""What refuses a create before anything is placed (bai_session_ledger state=reserved):
a ledger that is missing while the agents run sessions (a ledger is never read as
empty), agents that run another ledger's sessions (two ledgers would give one cluster's
capacity out twice), and an agent that did not answer and may hold the session (nothing
can tell a rerun from a race). Each refusal changes nothing."""

from __future__ import annotations

from collections.abc import Sequence

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    kept_reads,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import admission
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerFailure,
    LedgerRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import SessionSpec


def refuse_create(
    request: LedgerRequest,
    ledger: Ledger,
    spec: SessionSpec,
    fresh: Sequence[AgentRead],
    missing: str,
    where: str,
    ids: Sequence[str] | None,
) -> dict[str, str]:
    """Raise LedgerFailure, changing nothing, when the create must not go on: its ledger
    is missing while the agents run sessions, the agents run another ledger's sessions, or
    an agent that did not answer may hold the session. Else the agents that did not
    answer this create's read (passed over), with why."""
    if missing:
        _refuse_missing(request, fresh, missing, where)
    others = {
        str(row.get("name")): str(row["ledger"])
        for r in fresh
        for row in (r.sessions or {}).values()
        if ids and row.get("ledger") and row["ledger"] not in ids
    }
    if others:
        raise LedgerFailure(
            f"the agents run {admission.foreign_text(others)}, not by {where} "
            f"({ids[0] if ids else '?'}): two ledgers for one cluster would give its capacity "
            f"out twice. {admission.ADOPT_ADVICE}. Nothing was changed."
        )
    # Agents this create tried to read and that did not answer are passed over, unless
    # they may hold this session: then nothing can tell a rerun from a race.
    read_now = {r.name for r in fresh}
    away = {
        str(a): "did not answer this create's read (unreachable, or its engine failed)"
        for a in request.unanswered
        if a not in read_now
    }
    stuck = sorted(set(away) & kept_reads.holders(ledger, spec.name))
    if stuck:
        raise LedgerFailure(
            f"session {spec.name} was not placed: agent(s) {', '.join(stuck)} did not "
            f"answer and may hold it (its reservation or their last read names them); "
            f"nothing was changed. Run the create again once they answer, or destroy the "
            f"session (bai-cluster session destroy --force)."
        )
    return away


def _refuse_missing(
    request: LedgerRequest, fresh: Sequence[AgentRead], missing: str, where: str
) -> None:
    """A ledger that is missing is never read as empty: refuse the create when it was
    written before, or when the agents run sessions it does not know."""
    running = sorted({str(row.get("name")) for r in fresh for row in (r.sessions or {}).values()})
    if missing == "lost" or running:
        how = (
            f"is missing (it was written before: {request.path}.id is there)"
            if missing == "lost"
            else "does not exist yet"
        )
        seen = (
            f", and the agents run sessions it does not know ({', '.join(running)})"
            if running
            else ""
        )
        raise LedgerFailure(
            f"{where} {how}{seen}: a ledger is never "
            f"read as empty. If this cluster's ledger was lost, {document.REBUILD_HINT}; if "
            f"another ledger serves these agents, use it (bai_ledger_host, "
            f"bai_ledger_path). Nothing was changed."
        )
