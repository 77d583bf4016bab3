"""``place``: which agent runs which kernel of a request, or ``Pending`` saying why none
does now (docs/placement.md). Nothing is half-placed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_RESOURCES,
    WAIT_TOPOLOGY,
    Pending,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    fit,
    pending,
    rules,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.agent import (
    Agent,
    OutOfService,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.domain import (
    Domain,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    TOPOLOGY,
    Placement,
    PlacementRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    MODE_MULTI,
    MODE_SINGLE,
)


def place(
    request: PlacementRequest,
    agents: Sequence[Agent],
    *,
    out_of_service: Sequence[OutOfService] = (),
) -> Placement:
    """Choose an agent for every kernel of ``request``, or raise ``Pending``.

    The rules (rules.py) narrow the agents to the parts the request may use (one part,
    or one per topology domain); in the first part where it fits: single-node puts
    every kernel on the one agent that fits their sum and keeps the most free capacity
    (free CPU, then free memory, then name);
    multi-node the same if one agent fits all (the result then says single-node), else
    kernels are spread, in kernel order, each to the agent with the most capacity left
    that fits it.

    ``agents`` are those placement may use; ``out_of_service`` the others (paused,
    drained, down). Their room is never counted, so every mode, and the collapse of a
    multi-node session onto one agent, passes over them; a PENDING names them and is
    never permanent while the request's group has any (they may come back).
    """
    _check_unique(agents)
    everything = Domain("", tuple(agents), tuple(sorted(out_of_service, key=_by_name)))
    away = [a for a in everything.away if a.group == request.resource_group]
    try:
        parts = rules.narrow(request, everything)
        missed: list[tuple[Domain, Pending]] = []
        for part in parts:
            try:
                return _place_in(request, part)
            except Pending as exc:
                missed.append((part, exc))
        raise _in_no_part(request, missed)
    except Pending as exc:
        if not away:
            raise
        # What is out of service may come back: waiting can help.
        raise Pending(
            exc.reason + pending.out_of_service_note(away), permanent=False, kind=exc.kind
        ) from None


def _in_no_part(request: PlacementRequest, missed: list[tuple[Domain, Pending]]) -> Pending:
    """The PENDING of a request that fits in no part, told by the parts of the level it
    keeps to (not the narrower ones a widened request tried first): waiting for
    topology (WAIT_TOPOLOGY) when those parts together have room for it now."""
    required = request.constraint(TOPOLOGY) or ""
    missed = [m for m in missed if m[0].level == required] or missed
    out = pending.in_no_part(missed, request.kernels)
    if len(missed) > 1 and missed[0][0].level and out.kind == WAIT_RESOURCES:
        together = [agent for part, _exc in missed for agent in part.agents]
        if fit.spread(request.kernels, together) is not None:
            out.kind = WAIT_TOPOLOGY
    return out


def _place_in(request: PlacementRequest, domain: Domain) -> Placement:
    """``request`` placed by its mode's strategy on ``domain``'s agents, or Pending."""
    kernels, group = request.kernels, list(domain.agents)
    # What the PENDING calls these agents: a topology domain, or the resource group.
    name = domain.name or f"resource group {request.resource_group!r}"
    # Whether "never" can be said: an agent out of service may be bigger.
    whole_group = not domain.away
    if whole_group:
        pending.check_never_fits(kernels, group, name)
    whole = fit.on_one(kernels, group)
    if whole is not None:
        return whole
    if request.mode == MODE_SINGLE:
        raise pending.single_node_pending(kernels, group, name, whole_group)
    assignment = fit.spread(kernels, group)
    if assignment is None:
        raise pending.multi_node_pending(kernels, group, name, whole_group)
    used = set(assignment.values())
    return Placement(MODE_MULTI if len(used) > 1 else MODE_SINGLE, assignment)


def _check_unique(agents: Sequence[Agent]) -> None:
    counts = Counter(agent.name for agent in agents)
    duplicates = sorted(name for name, n in counts.items() if n > 1)
    if duplicates:
        raise ValueError(f"agent name(s) listed more than once: {', '.join(duplicates)}")


def _by_name(item: Agent | OutOfService) -> str:
    return item.name
