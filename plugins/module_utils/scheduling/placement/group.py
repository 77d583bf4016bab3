"""The resource-group rule: a session's members are placed on agents of its resource
group only (docs/placement.md, "Resource groups")."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_NO_AGENTS,
    Pending,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.agent import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.domain import (
    Domain,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    PlacementRequest,
)


class InResourceGroup:
    """The agents of the request's resource group; PENDING when it has none in service
    (permanent when it has none at all)."""

    name = "resource_group"

    def narrow(self, request: PlacementRequest, domain: Domain) -> list[Domain]:
        wanted = request.resource_group
        agents = tuple(sorted((a for a in domain.agents if a.group == wanted), key=_by_name))
        away = tuple(a for a in domain.away if a.group == wanted)
        if not agents and away:
            raise Pending(
                f"no agent of resource group {wanted!r} is in service", kind=WAIT_NO_AGENTS
            )
        if not agents:
            groups = sorted({agent.group for agent in domain.agents})
            known = ", ".join(repr(g) for g in groups) if groups else "none (no agents at all)"
            raise Pending(
                f"resource group {wanted!r} has no agents; groups with agents: {known}",
                permanent=True,
            )
        return [Domain(domain.name, agents, away)]


def _by_name(agent: Agent) -> str:
    return agent.name
