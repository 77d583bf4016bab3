"""What a create knows the agents by (bai_session_ledger state=reserved, reserve.py): this
run's reads, the ledger's kept reads and hints, and the agents it must read before it
places anything (docs/placement.md, "Reading only the agents a create must")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    availability as avail,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    kept_reads,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.roster import SwarmNode
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import SessionSpec
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    spec_hash,
)


@dataclass
class CreateStep:
    """What one create step has learnt so far."""

    spec: SessionSpec  # with the owner's lifetime once placement gave it one
    queued: document.QueueEntry | None  # its queue entry, when it is queued
    final: bool  # a waiting create: it places by the kept reads alone
    fresh: list[AgentRead]  # this run's reads, on the ledger's clock
    dropped: list[str] = field(default_factory=list)  # reservations the reads settled
    adopted: list[str] = field(default_factory=list)
    read: set[str] = field(default_factory=set)  # the agents read afresh (with O(agents))
    kept: list[str] = field(default_factory=list)  # the agents known by kept reads
    hinted: dict[str, AgentRead] = field(default_factory=dict)
    records: Mapping[str, document.KeptRead] = field(default_factory=dict)  # kept reads
    unavailable: dict[str, str] = field(default_factory=dict)  # agent -> why it takes none

    def ask_to_read(self, agents: list[str], now: float) -> dict[str, Any]:
        """Place nothing yet: read these agents and ask again (fresh reads are kept)."""
        return {
            "changed": bool(self.dropped or self.adopted),
            "save": bool(self.fresh),
            "need_read": agents,
            "ledger_time": now,
            "dropped": self.dropped,
        }


def by_inventory(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    create: CreateStep,
    missing: str,
    away: Mapping[str, str],
    nodes: Mapping[str, SwarmNode] | None,
) -> dict[str, Any] | None:
    """Know every agent of the inventory (O(agents)) by this run's reads, kept reads or
    hints; the answer that asks to read some first, or None when placement can go on."""
    spec = create.spec
    inventory = request.inventory
    kept_reads.remember(ledger, create.fresh, now, inventory)
    read = {r.name for r in create.fresh}
    create.read = read
    found = kept_reads.sources(
        ledger,
        list(inventory.values()),
        name=spec.name,
        images=[role.image for role in spec.roles],
        paths=[mount.src for mount in spec.mounts],
        fresh=read,
        now=now,
        max_age=request.read_max_age,
        nodes=nodes,
        # A missing ledger is never read as empty: every agent is read first.
        hints=not missing,
        away=away,
    )
    # A waiting create (final) reads only what an expired reservation needs.
    overdue = [a for a in kept_reads.overdue_agents(ledger, now) if a not in read and a not in away]
    need = overdue if create.final else found.read
    held = ledger.sessions.get(spec.name)
    if need:
        return _asking(create, need, now, held)
    # Only a fresh read of its agents tells a rerun from a race: a session this run
    # has not seen is read first (a waiting run meets it once the other run made it).
    holding = kept_reads.holders(ledger, spec.name) - read
    if holding and not (held and held.state == document.CREATING):
        return _asking(create, sorted(holding), now, held)
    create.records = ledger.agents or {}
    create.kept, create.hinted = found.kept, found.hinted
    create.unavailable = {**found.unavailable, **create.unavailable}
    return None


def _asking(
    create: CreateStep, agents: list[str], now: float, held: document.Reservation | None
) -> dict[str, Any]:
    """Ask to read ``agents``. A rerun of the session the ledger holds, confirmed, with
    this very request: its entry goes with the question, and when the reads show the
    session whole and running the caller takes the plan from them (rerun.py), with no
    second transaction; anything else comes back here."""
    asked = create.ask_to_read(agents, now)
    if (
        held
        and held.state == document.READY
        and held.spec_hash == spec_hash(create.spec)
        and not create.final
    ):
        asked["rerun"] = {**held.to_dict(), "name": create.spec.name}
    return asked


def by_reads(ledger: Ledger, create: CreateStep, away: Mapping[str, str]) -> None:
    """Without O(agents): the agents are those read; the paused ones take no session."""
    create.unavailable.update(away)
    paused = avail.records(ledger)
    for r in create.fresh:
        why = avail.unavailable(r.name, r.identity, paused, None)
        if why:
            create.unavailable.setdefault(r.name, why)
