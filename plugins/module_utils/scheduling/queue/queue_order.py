"""The queue's order (docs/placement.md, "Priority"): by priority (``priority``, the
default: priority.py's weighted sum of age, fair share and the owner's policy priority),
or submission order (``fifo``).

``bai_session_policies.queue`` chooses it::

    queue:
      order: priority          # the default; or fifo
      weight_age: 1000         # the factors' weights (these are the defaults)
      weight_fairshare: 1000
      weight_priority: 1000
      age_max_s: 604800        # the wait at which the age factor reaches 1 (7 days)
      half_life_s: 604800      # how fast usage is forgotten (fair_usage.py)
      backfill: false          # start later sessions that end before blocked ones start
      backfill_margin_s: 120   # how late a lifetime may be enforced (backfill.py)
      preemption: true         # stop preemptible sessions for higher ones (preemption.py)
      preempt_grace_s: 300     # the longest warning a victim's end signal gets

The owners' ``priority`` and ``share`` come from the same policies (policies.standing).

One :class:`QueueOrder` orders every reading of the queue in a ledger step - the pass
(scheduler.schedule), what a create may take (scheduler.room) and each queued
session's position - so what is listed and what starts cannot disagree. Within a
resource group a gang starting again stays first, then the highest priority, then
submission order; with ``fifo``, or with one owner and no explicit priorities, that is
the submission order. Pure: no Ansible, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import (
    reject_unknown,
    require_mapping,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    fair_usage,
    priority,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.backfill import held_by
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.policies import (
    FIELD,
    lifetime,
    limits_for,
    parse_policies,
    standing,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queued import (
    Backfill,
    Decision,
    Waiting,
    fifo,
)

FIFO = "fifo"
PRIORITY = "priority"
ORDERS = (FIFO, PRIORITY)
_NUMBERS = ("weight_age", "weight_fairshare", "weight_priority", "age_max_s", "half_life_s")
# How late a lifetime may be enforced: the housekeeping pass's interval and the stop grace.
BACKFILL_MARGIN_S = 120.0
# The longest a preemption waits after a victim's end signal (its lead) before it stops it.
PREEMPT_GRACE_S = 300.0


@dataclass(frozen=True)
class QueuePolicy:
    """``bai_session_policies.queue``, parsed."""

    order: str = PRIORITY
    weights: priority.Weights = field(default_factory=priority.Weights)
    backfill: bool = False
    backfill_margin_s: float = BACKFILL_MARGIN_S
    preemption: bool = True
    preempt_grace_s: float = PREEMPT_GRACE_S


@dataclass(frozen=True)
class Policies:
    """``bai_session_policies``, parsed once per run of the ledger module: each owner's
    limits (policies.parse_policies: "default" and each owner named) and the queue's
    policy."""

    owners: Mapping[str, Mapping[str, float | None]] = field(
        default_factory=lambda: {"default": {}}
    )
    queue: QueuePolicy = field(default_factory=QueuePolicy)

    @classmethod
    def of(cls, raw: Any) -> Policies:
        """Parse raw ``bai_session_policies`` (SpecError naming the field)."""
        return cls(parse_policies(raw), parse_queue_policy(raw))


def parse_queue_policy(raw: Any) -> QueuePolicy:
    """The queue section of raw ``bai_session_policies`` (SpecError naming the field)."""
    section = raw.get("queue") if isinstance(raw, Mapping) else None
    if section is None:
        return QueuePolicy()
    where = f"{FIELD}.queue"
    require_mapping(section, where)
    known = ("order", "backfill", "backfill_margin_s", "preemption", "preempt_grace_s")
    reject_unknown(section, (*known, *_NUMBERS), where)
    order = section.get("order", PRIORITY)
    if order not in ORDERS:
        raise SpecError(f"{where}.order: got {order!r}; expected one of {', '.join(ORDERS)}")
    given: dict[str, float] = {}
    for key in _NUMBERS:
        if key in section:
            value = section[key]
            positive = key in ("age_max_s", "half_life_s")
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok or value < 0 or (positive and value == 0) or value > 1e9:
                kind = "above 0" if positive else "from 0"
                raise SpecError(f"{where}.{key}: got {value!r}; expected a number {kind}")
            given[key.replace("weight_", "")] = float(value)
    backfill = _flag(section.get("backfill", False), f"{where}.backfill")
    margin = _seconds(
        section.get("backfill_margin_s", BACKFILL_MARGIN_S), f"{where}.backfill_margin_s"
    )
    preempting = _flag(section.get("preemption", True), f"{where}.preemption")
    grace = _seconds(section.get("preempt_grace_s", PREEMPT_GRACE_S), f"{where}.preempt_grace_s")
    return QueuePolicy(order, priority.Weights(**given), backfill, margin, preempting, grace)


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{where}: got {value!r}; expected true or false")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86400:
        raise SpecError(f"{where}: got {value!r}; expected 0 to 86400 seconds")
    return float(value)


@dataclass
class QueueOrder:
    """The sort key of every queued session of one ledger step (module docstring)."""

    policy: QueuePolicy = field(default_factory=QueuePolicy)
    policies: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    usage: priority.Usage = field(default_factory=priority.Usage)
    shares: dict[str, float] = field(default_factory=dict)
    now: float = 0.0
    capacity_rate: float = 0.0  # units a second the agents offer (their kept reads)

    def factors(self, owner: str, submitted_at: float) -> priority.Factors:
        explicit, _share = standing(self.policies, owner)
        return priority.factors(
            self.now - submitted_at,
            owner,
            self.usage,
            self.shares,
            explicit,
            self.policy.weights,
            self.capacity_rate,
        )

    def __call__(
        self, group: str, owner: str, head: bool, submitted_at: float, seq: int, name: str
    ) -> tuple[Any, ...]:
        if self.policy.order == FIFO:
            return fifo(group, owner, head, submitted_at, seq, name)
        value = self.factors(owner, submitted_at).priority
        return (group, *priority.order_key(value, head, submitted_at, seq, name))


def order_of(given: Policies, ledger: Ledger, now: float, full: bool = False) -> QueueOrder:
    """The order of ``ledger``'s queue at ``now`` under the policies ``given``
    (``full``: with the usage and shares even for ``fifo``, for :func:`explain`)."""
    policy = given.queue
    if policy.order == FIFO and not full:
        return QueueOrder(policy)
    policies = given.owners
    usage = fair_usage.current(ledger, now, policy.weights.half_life_s)
    owners = set(usage.units) | {str(e.owner or "") for e in (ledger.queue or {}).values()}
    shares = {owner: standing(policies, owner)[1] for owner in owners}
    return QueueOrder(policy, policies, usage, shares, now, capacity_rate(ledger))


def capacity_rate(ledger: Ledger, rates: priority.Rates = fair_usage.RATES) -> float:
    """The units a second the agents the ledger keeps a read of offer in all."""
    total = 0.0
    for record in (ledger.agents or {}).values():
        agent = record.agent
        total += rates.rate(float(agent.cpu or 0), float(agent.mem or 0), float(agent.gpu or 0))
    return total


def explain(
    ordering: QueueOrder, entry: QueueEntry, decision: Decision | None = None
) -> dict[str, Any]:
    """Why a queued session is where it is (bai-cluster session explain): the order, its
    priority and each factor with its weight (``ordering`` built ``full``), its owner's
    usage and share. The position and the reason it waits are the queue's own (what the
    same order and the last scheduler pass gave); ``decision``, the scheduler pass's for
    it now (schedule.decide), adds what it claims, its earliest start and backfill."""
    owner = str(entry.owner or "")
    found = ordering.factors(owner, float(entry.submitted_at))
    weights = ordering.policy.weights
    rows = (
        ("age", found.age, weights.age),
        ("fairshare", found.fairshare, weights.fairshare),
        ("priority", found.explicit, weights.priority),
    )
    out = {
        "order": ordering.policy.order,
        "priority": priority.points(found.priority),
        "factors": {
            name: {"value": round(value, 6), "weight": weight, "points": round(value * weight, 3)}
            for name, value, weight in rows
        },
        "owner": owner,
        "owner_usage_units": round(found.used, 3),
        "owner_share": round(found.share, 6),
        "waited_s": round(max(0.0, ordering.now - float(entry.submitted_at)), 3),
        "age_max_s": weights.age_max_s,
        "half_life_s": weights.half_life_s,
    }
    if decision is not None:
        out["pass"] = _pass_view(decision, ordering)
    return out


def _pass_view(decision: Decision, ordering: QueueOrder) -> dict[str, Any]:
    """What the scheduler pass decides for a queued session now, as explain shows it."""
    at = decision.earliest_start
    on = ordering.policy.backfill
    why = decision.no_backfill
    if decision.behind and not on:
        why = "backfill is off (bai_session_policies.queue.backfill)"
    elif decision.starts and decision.behind:
        why = ""  # it starts ahead of them: it backfills
    return {
        "starts": decision.starts,
        "agents": sorted(set(decision.placement.agents)) if decision.placement else [],
        "reason": decision.reason,
        "wait": decision.wait,
        "behind": list(decision.behind),
        "claims": list(decision.claims),
        "earliest_start": at,
        "earliest_start_in_s": None if at is None else round(max(0.0, at - ordering.now)),
        "backfill": on,
        "no_backfill": why,
    }


def backfill_of(given: Policies, ledger: Ledger, now: float) -> Backfill | None:
    """The pass's backfill (queued.Backfill) when the policy asks for it: every
    reservation's containers with the end of its lifetime (None: no lifetime)."""
    policy = given.queue
    if not policy.backfill:
        return None
    running = [
        row
        for entry in ledger.sessions.values()
        for row in held_by(entry, float(entry.deadline) if entry.deadline else None)
    ]
    return Backfill(tuple(running), now, policy.backfill_margin_s)


def with_lifetimes(queue: list[Waiting], given: Policies) -> list[Waiting]:
    """``queue`` with each session's lifetime as it will run: its own, else its owner's
    longest (policies.lifetime); what backfill counts on."""
    parsed = given.owners
    out = []
    for session in queue:
        life = lifetime(limits_for(parsed, session.owner), session.lifetime_s or 0)
        out.append(replace(session, lifetime_s=float(life) if life else None))
    return out
