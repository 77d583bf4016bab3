"""A create's step under the ledger's lock (bai_session_ledger state=reserved): place the
session and reserve what it needs (docs/placement.md).

In order: a queued session waits for its ticket (:func:`reserve`); a missing ledger, the
agents of another ledger, or an agent that did not answer and may hold the session refuse
the create (refusals.py); the ledger settles what the fresh reads show
(reservations.expire, usage.drop_stale); the agents are known by fresh reads, kept reads
or hints (:func:`by_inventory`), and the create asks to read those it must before it
places; placement counts the reservations, the owner's limits and the queue ahead of it
(:func:`_plan`); a session that does not fit waits in the queue or is refused
(:func:`_not_placed`); one that fits is reserved (:func:`_commit`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_BEHIND,
    WAIT_OWNER_LIMIT,
    Pending,
    SessionConflict,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import queue as queue_
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    availability as avail,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    counters,
    kept_reads,
    reservations,
    usage,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.roster import SwarmNode
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    TopologyAsk,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import queue_order
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.policies import (
    Limits,
    lifetime,
    limits_for,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import restarts
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.create_reads import (
    CreateStep,
    by_inventory,
    by_reads,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerFailure,
    LedgerRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import (
    agents_from_reads,
    placement_failure,
    plan_session,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.refusals import (
    refuse_create,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.schedule import (
    PolicyWait,
    order,
    out_of_service,
    owner_refusal,
    queued_view,
    refuse_past_limits,
    wait_in_queue,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import SessionSpec
from ansible_collections.bai.cluster.plugins.module_utils.session.plan import (
    SessionPlan,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
    spec_hash,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    prefer_note,
    widening,
)


def _ignore(_message: str) -> None:
    pass


def reserve(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    missing: str = "",
    where: str = "",
    ids: Sequence[str] | None = None,
    nodes: Mapping[str, SwarmNode] | None = None,
    warn: Callable[[str], None] = _ignore,
) -> dict[str, Any]:
    """state=reserved: place the request's session and reserve it in ``ledger`` (or say
    which agents to read first, or queue it); raise LedgerFailure when it is refused."""
    try:
        spec = normalize_spec(dict(request.spec or {}))
    except SpecError as exc:
        raise LedgerFailure(f"invalid session spec: {exc}") from None
    # Queued already: a rerun of the request finds it waiting; only the create holding
    # the lease of a scheduler pass (ticket) tries to start it.
    queued = queue_.queue_of(ledger).get(spec.name)
    if queued is not None:
        if queued.spec_hash != spec_hash(spec):
            raise LedgerFailure(
                f"session {spec.name} is queued (PENDING) with another request; cancel "
                f"it first (bai-cluster session destroy {spec.name}) or choose another "
                f"name; nothing was changed",
                conflict=True,
            )
        if not queue_.holds_ticket(queued, request.ticket, now):
            view = queued_view(ledger, spec.name, order(request, ledger, now))
            return {"changed": False, "queued": view}
    final = request.final and request.agents is not None
    # A waiting create (final) places by the kept reads alone: they follow destroys
    # (forget_session), the reads it made before waiting do not.
    try:
        fresh = [] if final else kept_reads.this_run(request.agent_info or [])
    except SpecError as exc:
        raise LedgerFailure(f"bai_session_ledger: {exc}") from None
    create = CreateStep(spec, queued, final, fresh)
    away = refuse_create(request, ledger, spec, fresh, missing, where, ids)
    expiry = reservations.expire(ledger, now, fresh)
    create.dropped = expiry.dropped + usage.drop_stale(ledger, fresh)
    create.adopted = expiry.adopted
    if expiry.stuck:
        warn(
            f"session(s) {', '.join(expiry.stuck)}: a create died part-way and its agents "
            f"run part of it; it keeps its share until bai-cluster session reconcile "
            f"removes it"
        )
    # Agents that take no new session: paused or drained by their own record (a fresh
    # read says so) or the ledger's, or down in the swarm's node list.
    create.unavailable = {
        r.name: avail.describe(avail.of_read(r.agent)) for r in fresh if r.agent.availability
    }
    if request.agents is not None:  # the inventory's agents: kept reads for the rest
        asked = by_inventory(request, ledger, now, create, missing, away, nodes)
        if asked is not None:
            return asked
    else:
        by_reads(ledger, create, away)
    return _place(request, ledger, now, create)


def _place(
    request: LedgerRequest, ledger: Ledger, now: float, create: CreateStep
) -> dict[str, Any]:
    """Place the session on what the agents have left, and reserve it."""
    # Down, drained or paused agents take no new session (a holder's read stays).
    info = [r for r in create.fresh if r.name not in create.unavailable or r.containers]
    if request.agents is not None:
        info += [kept_reads.kept_result(create.records[a]) for a in create.kept]
        info += list(create.hinted.values())
    try:
        agents, existing, inventory = agents_from_reads(
            usage.adjust(info, ledger), labels=request.labels
        )
    except SpecError as exc:
        raise LedgerFailure(f"bai_session_ledger: {exc}") from None
    read_at = min((r.read_at for r in info), default=0.0)
    try:
        usable = list(agents or [])
        plan = _plan(request, ledger, now, create, usable, existing, inventory, read_at)
    except PolicyWait as exc:
        return wait_in_queue(
            request,
            ledger,
            create.spec,
            create.queued,
            now,
            str(exc),
            create.dropped,
            wait=WAIT_OWNER_LIMIT,
        )
    except (Pending, SpecError) as exc:
        return _not_placed(request, ledger, now, create, exc)
    except SessionConflict as exc:
        failure = placement_failure(create.spec.name, exc)
        raise LedgerFailure(failure.pop("msg"), **failure) from None
    # Placed by hints (capacity without a recent read): read those agents, place again.
    unverified = [a for a in plan.agents if a in create.hinted]
    if unverified:
        return create.ask_to_read(unverified, now)
    return _commit(request, ledger, now, create, plan)


def _as_placed(spec: SessionSpec, limits: Limits) -> SessionSpec:
    """``spec`` as it is placed: without a lifetime of its own, with its owner's longest."""
    return replace(spec, lifetime_s=int(lifetime(limits, spec.lifetime_s)))


def _topology(
    spec: SessionSpec, request: LedgerRequest, create: CreateStep, now: float
) -> TopologyAsk:
    """What a session keeps to of its topology now: a queued one's preferred level
    widened by its time in the queue (session/topology_request.py), a gang starting again
    the domain of its last attempt first; a new one, its own level."""
    queued = create.queued
    waited = now - float(queued.submitted_at) if queued else 0.0
    level, first = widening(spec.topology, spec.topology_prefer_s, waited, request.levels)
    return TopologyAsk(level, first, queue_.home_of(queued))


def _plan(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    create: CreateStep,
    usable: list[Any],
    existing: Any,
    inventory: Any,
    read_at: float,
) -> SessionPlan:
    """The session's plan: refused while another run creates it (Pending), past the
    owner's limits (PolicyWait, LedgerFailure), or where the agents have no room, counting
    what the queued sessions ahead of it need (Pending)."""
    spec = create.spec
    entry = ledger.sessions.get(spec.name)
    if entry is not None:
        entry = replace(entry, name=spec.name)
    if usage.before_placing(entry, existing, read_at) == "place" and entry is not None:
        del ledger.sessions[spec.name]  # stale: its containers are gone
    policies = request.policy.owners
    limits = limits_for(policies, spec.owner)
    if spec.name not in ledger.sessions and not existing:
        refuse_past_limits(request, spec, limits, ledger)
    spec = create.spec = _as_placed(spec, limits)
    topology = _topology(spec, request, create, now)
    queued = create.queued
    passed_over = out_of_service(request.inventory.values(), create.fresh, create.unavailable)
    # A gang starting again keeps its session id (restarts.py).
    kept_id = queued.session_id if queued else None
    plan = partial(
        plan_session,
        existing=existing,
        inventory=inventory,
        out_of_service=passed_over,
        topology=topology,
    )
    if existing or not queue_.queue_of(ledger):
        return plan(spec, usable, session_id=kept_id)
    # Only what the queued sessions ahead of it leave (docs/placement.md).
    me = queue_.waiting_of(
        spec,
        float(queued.submitted_at) if queued else now,
        int(queued.seq or 0) if queued else queue_.next_seq(ledger),
        bool(queued and queued.head),
        topology.home,
    ).widened(now, request.levels)
    ordering = order(request, ledger, now)
    filling = queue_order.backfill_of(request.policy, ledger, now)
    ahead_of_me = queue_.waiting(ledger, ordering, now, request.levels)
    room = queue_.room(
        queue_order.with_lifetimes(ahead_of_me, request.policy) if filling else ahead_of_me,
        me,
        usable,
        out_of_service=passed_over,
        refuse=owner_refusal(policies, ledger),
        order=ordering,
        backfill=filling,
    )
    try:
        return plan(spec, room.usable(), session_id=kept_id)
    except Pending:
        ahead = room.ahead(me)
        if not ahead:
            raise
        # It would fit but for the older queued sessions: it waits its turn.
        plan(spec, usable)
        raise Pending(
            f"waits behind {', '.join(ahead)} (queued before it, waiting for "
            f"agents this session would use)",
            kind=WAIT_BEHIND,
        ) from None


def _not_placed(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    create: CreateStep,
    exc: Pending | SpecError,
) -> dict[str, Any]:
    """A session that does not fit: read the kept agents afresh, wait in the queue, leave
    it (a scheduled start that can never start), or fail."""
    spec, queued = create.spec, create.queued
    if create.kept and not create.final:
        # Kept reads only ever say yes: read those agents before saying no.
        return create.ask_to_read(create.kept, now)
    # Queued, unless waiting cannot help (a preferred topology widens: it may) or the name
    # is another run's right now.
    widens = bool(spec.topology and spec.topology_prefer_s)
    if (
        isinstance(exc, Pending)
        and (widens or not exc.permanent)
        and (request.queue or queued)
        and spec.name not in ledger.sessions
    ):
        asked = queue_.as_spec(queued) if queued else spec
        since = float(queued.submitted_at) if queued else now
        note = prefer_note(asked.topology, spec.topology_prefer_s, since, now, request.levels)
        return wait_in_queue(
            request, ledger, spec, queued, now, exc.reason + note, create.dropped, wait=exc.kind
        )
    if queued:
        # The scheduled start of a queued session that can never start here.
        queue_.dequeue(ledger, spec.name)
        return {
            **placement_failure(spec.name, exc),
            "failed": True,
            "changed": True,
            "msg": f"{placement_failure(spec.name, exc)['msg']}; it left the queue",
        }
    failure = placement_failure(spec.name, exc)
    if isinstance(exc, Pending):
        failure["dropped"] = create.dropped
        failure["unavailable"] = sorted(
            a.name
            for a in out_of_service(request.inventory.values(), create.fresh, create.unavailable)
            if a.group == spec.resource_group
        )
    raise LedgerFailure(failure.pop("msg"), **failure)


def _commit(
    request: LedgerRequest,
    ledger: Ledger,
    now: float,
    create: CreateStep,
    plan: SessionPlan,
) -> dict[str, Any]:
    """Reserve what the plan gives out (a session made before the ledger is taken in as
    it is; a scheduled start leaves the queue in this very step)."""
    spec, queued = create.spec, create.queued
    plan = plan.answering(
        spec,
        read=sorted(create.read) if request.agents is not None else None,
        kept=create.kept,
        unavailable=sorted(create.unavailable),
    )
    # Keeping the agents' reads is bookkeeping, not a change to the cluster.
    changed = bool(create.dropped or create.adopted)
    if spec.name not in ledger.sessions:
        entry = reservations.reservation(plan, now=now, ttl=request.ttl)
        if plan.exists:  # made before the ledger: take it in as it is
            entry.confirm(now)
        if queued:  # the scheduled start: it leaves the queue in this very step
            queue_.dequeue(ledger, spec.name)
            entry.came_from_queue(queued.submitted_at)
        if not plan.exists:
            waited = now - counters.queued_since(queued) if queued else 0.0
            counters.observe_wait(ledger, spec.resource_group, waited)
        restarts.keep_policy(entry, spec, request.authorized_keys, queued)
        ledger.sessions[spec.name] = entry
        changed = True
    held = ledger.sessions[spec.name]
    plan = plan.with_deadline(held.deadline).with_attempt(held.attempt)
    return {
        **plan.to_dict(),
        "changed": changed,
        "reservation": held.to_dict(),
        "dropped": create.dropped,
        "adopted": create.adopted,
        "save": bool(create.fresh),
    }
