"""The queue's side of bai_session_ledger (docs/placement.md, "The queue"): the owners'
limits on a new session, a session waiting its turn, the queue as list shows it, and the
scheduler's pass (state=scheduled) that says which queued sessions start now."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_RESOURCES,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import queue as queue_
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    availability as avail,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    counters,
    kept_reads,
    roster,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.usage import adjust
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    OutOfService,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    preemption,
    queue_order,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.policies import (
    Limits,
    forever,
    limits_for,
    refusal,
    standing,
    usage,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import end_signals
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerFailure,
    LedgerRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import (
    agents_from_reads,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    Kernel,
    Resources,
    SessionSpec,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import kernel_id
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import expand_kernels
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    prefer_note,
)


class PolicyWait(Exception):
    """The owner's limits refuse the session for now; with O(queue) it waits."""


def total(kernels: Iterable[Kernel]) -> Resources:
    """The resources of ``kernels`` in all."""
    request = Resources(0.0, 0, 0)
    for kernel in kernels:
        request = request + kernel.resources
    return request


def refuse_past_limits(
    request: LedgerRequest, spec: SessionSpec, limits: Limits, ledger: Ledger
) -> None:
    """Fail, changing nothing, when the owner's ``limits`` refuse a new session ``spec``
    (with O(queue), raise PolicyWait unless its lifetime is past the owner's longest,
    which waiting cannot change)."""
    held = usage(ledger.sessions.values(), spec.owner)
    why = refusal(
        limits, held, spec.name, total(expand_kernels(spec)), spec.lifetime_s, spec.restarts
    )
    if not why:
        return
    permanent = bool(forever(limits, spec.lifetime_s, spec.restarts))
    if not permanent and (request.queue or spec.name in queue_.queue_of(ledger)):
        raise PolicyWait(f"refused for now by the owner's limits: {why}")
    raise LedgerFailure(f"refused by the owner's limits: {why}; nothing was created", policy=True)


def owner_refusal(
    policies: Mapping[str, Mapping[str, float | None]], ledger: Ledger
) -> Callable[[queue_.Waiting, Sequence[queue_.Waiting]], str]:
    """For the queue's pass: why the owner's limits hold a queued session back, counting
    the ledger's sessions and those this pass starts before it."""

    def refuse(session: queue_.Waiting, started: Sequence[queue_.Waiting]) -> str:
        limits = limits_for(policies, session.owner)
        held = usage(ledger.sessions.values(), session.owner)
        for other in started:
            if other.owner == session.owner:
                held = held.plus(other.name, total(other.kernels))
        return refusal(limits, held, session.name, total(session.kernels))

    return refuse


def queued_view(ledger: Ledger, name: str, order: queue_.Order = queue_.fifo) -> dict[str, Any]:
    entry = queue_.queue_of(ledger)[name]
    return queue_.queued_view(entry, queue_.positions(ledger, order)[name])


def order(request: LedgerRequest, ledger: Ledger, now: float) -> queue_.Order:
    """The queue's order in this step, under the request's policies (queue_order.py)."""
    return queue_order.order_of(request.policy, ledger, now)


def wait_in_queue(
    request: LedgerRequest,
    ledger: Ledger,
    spec: SessionSpec,
    queued: QueueEntry | None,
    now: float,
    reason: str,
    dropped: list[str],
    wait: str = WAIT_RESOURCES,
) -> dict[str, Any]:
    """Queue ``spec`` (or keep it queued, in its place, with the new reason): PENDING."""
    if queued is None:
        queue_.enqueue(
            ledger,
            spec,
            now=now,
            reason=reason,
            wait=wait,
            authorized_keys=request.authorized_keys,
        )
    else:
        queued.waits(reason, wait)
        queued.end_lease()
    view = queued_view(ledger, spec.name, order(request, ledger, now))
    return {"changed": True, "queued": view, "dropped": dropped}


def out_of_service(
    inventory: Iterable[roster.Declared],
    fresh: Sequence[AgentRead],
    unavailable: Mapping[str, str],
) -> list[OutOfService]:
    """The agents placement passed over (``unavailable``: name -> why), with their
    resource groups (the inventory's, else their reads')."""
    groups = {r.name: r.agent.group for r in fresh}
    groups.update({a.name: a.group for a in inventory})
    return [
        OutOfService(name, str(groups.get(name) or "default"), why)
        for name, why in sorted(unavailable.items())
    ]


def queue_list(
    ledger: Ledger, now: float | None = None, order: queue_.Order = queue_.fifo
) -> list[dict[str, Any]]:
    """Every queued session as list and show give it, in queue order (with ``now``, one
    a pass is starting waits for ``starting``)."""
    places = queue_.positions(ledger, order)
    entries = queue_.queue_of(ledger)
    return [
        queue_.queued_view(entries[name], places[name], now)
        for name in sorted(entries, key=lambda n: queue_.entry_key(entries[n], order))
    ]


def _known_agents(
    request: LedgerRequest, ledger: Ledger, nodes: Mapping[str, roster.SwarmNode] | None
) -> tuple[list[AgentRead], dict[str, str]]:
    """What the scheduler's pass knows of each agent of the inventory (its kept read, else
    a hint of its capacity), and the agents that take no new session, with why."""
    records = ledger.agents or {}
    paused = avail.records(ledger)
    info: list[AgentRead] = []
    unavailable: dict[str, str] = {}
    for name, agent in request.inventory.items():
        record = records.get(name)
        identity = record.identity if record else ""
        node = roster.node_of(nodes, name, identity)
        why = avail.unavailable(name, identity, paused, node)
        if why:
            unavailable[name] = why
            continue
        same = record is not None and record.declared == agent.record()
        if same and record is not None:
            info.append(kept_reads.kept_result(record))
            continue
        found = kept_reads.hint(agent, record if same else None, node)
        if found is not None:
            info.append(found)
    return info, unavailable


def pass_agents(
    request: LedgerRequest, ledger: Ledger, nodes: Mapping[str, roster.SwarmNode] | None
) -> tuple[list[Agent], list[OutOfService]]:
    """The agents a scheduler pass places on (by their kept reads, or their declared
    capacity, with the ledger's reservations), and those out of service."""
    info, unavailable = _known_agents(request, ledger, nodes)
    try:
        agents = agents_from_reads(adjust(info, ledger), labels=request.labels)[0]
    except SpecError as exc:
        raise LedgerFailure(f"bai_session_ledger: {exc}") from None
    return list(agents or []), out_of_service(request.inventory.values(), [], unavailable)


def decide(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    nodes: Mapping[str, roster.SwarmNode] | None,
    ordering: queue_.Order | None = None,
    known: tuple[list[Agent], list[OutOfService]] | None = None,
) -> list[queue_.Decision]:
    """The scheduler pass over ``ledger``'s queue (by the agents' kept reads, or their
    declared capacity: ``known``, else :func:`pass_agents`), changing nothing: what
    state=scheduled commits, and what ``session explain`` shows (one function, so they
    cannot disagree)."""
    agents, away = known or pass_agents(request, ledger, nodes)
    ordering = ordering or order(request, ledger, now)
    filling = queue_order.backfill_of(request.policy, ledger, now)
    queued = queue_.waiting(ledger, ordering, now, request.levels)
    decisions = queue_.schedule(
        queue_order.with_lifetimes(queued, request.policy) if filling else queued,
        agents,
        out_of_service=away,
        refuse=owner_refusal(request.policy.owners, ledger),
        order=ordering,
        backfill=filling,
    )
    return [_with_widening(d, now, request.levels) for d in decisions]


def _with_widening(decision: queue_.Decision, now: float, levels: Sequence[str]) -> queue_.Decision:
    """A waiting session that prefers a topology domain says when it widens next."""
    session = decision.session
    if decision.starts or not session.prefer_s:
        return decision
    note = prefer_note(session.topology, session.prefer_s, session.submitted_at, now, levels)
    return replace(decision, reason=decision.reason + note)


def preempts(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    decisions: Sequence[queue_.Decision],
    agents: Sequence[Agent],
) -> preemption.Preemption | None:
    """What this pass preempts (preemption.py), marked in the ledger; None when the
    policy turns preemption off or nothing is to be preempted."""
    policy = request.policy.queue
    if not policy.preemption:
        return None
    parsed = request.policy.owners
    chosen = preemption.plan(
        decisions,
        agents,
        ledger,
        lambda owner: standing(parsed, owner)[0],
        now,
        request.lease_s + policy.preempt_grace_s,
    )
    if chosen is not None:
        preemption.mark(ledger, chosen, now)
    return chosen


def scheduled(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    nodes: Mapping[str, roster.SwarmNode] | None,
) -> dict[str, Any]:
    """state=scheduled: which queued sessions start now (:func:`decide`), each one's
    reason recorded, and a lease for at most O(limit) of them."""
    entries = queue_.queue_of(ledger)
    if not entries:
        return {"changed": False, "start": [], "more": 0, "waiting": 0, "queue": []}
    began = time.monotonic()
    ordering = order(request, ledger, now)
    known = pass_agents(request, ledger, nodes)
    decisions = decide(request, ledger, now, nodes, ordering, known)
    changed, more = False, 0
    start: list[dict[str, Any]] = []
    for decision in decisions:
        entry = entries[decision.session.name]
        if decision.starts:
            if queue_.leased(entry, now):
                continue
            if len(start) >= request.limit:
                more += 1
                continue
            ticket = kernel_id()
            queue_.lease(entry, ticket, now, request.lease_s)
            changed = True
            start.append(
                {
                    "name": entry.name,
                    "ticket": ticket,
                    "spec": entry.spec,
                    "authorized_keys": list(entry.authorized_keys or []),
                }
            )
        elif (entry.reason, entry.wait) != (decision.reason, decision.wait):
            entry.waits(decision.reason, decision.wait)
            changed = True
    chosen = preempts(request, ledger, now, decisions, known[0])
    counters.note_pass(ledger, "schedule", now, time.monotonic() - began)
    return {
        "changed": changed or chosen is not None,
        "save": True,
        "start": start,
        # The session a preemption makes room for starts in the next run of the pass.
        "more": more + (chosen is not None),
        "waiting": len(entries),
        "queue": queue_list(ledger, order=ordering),
        "preempt": _preempt_result(ledger, chosen, request.policy.queue),
    }


def _preempt_result(
    ledger: Ledger, chosen: preemption.Preemption | None, policy: queue_order.QueuePolicy
) -> dict[str, Any]:
    """What session_schedule.yml needs to preempt: the victims, why, and the warnings to
    send first (their end signals, the longest lead within preempt_grace_s); {} for none."""
    if chosen is None:
        return {}
    cap = policy.preempt_grace_s
    return {**chosen.as_result(), **end_signals.warnings(ledger.sessions, chosen.victims, cap)}
