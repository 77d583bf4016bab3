"""The topology rule: a session that asks for one domain of a topology level (one rack,
one block) has every member placed inside one such domain, or waits.

An agent's domain at a level is its label of that name (``Agent.label``: the
inventory's topology labels, as its read carries them). The request names the level in
its ``topology`` constraint (``PlacementRequest.constraint``); without one the rule
does not narrow. Agents without a label for the level are never used by such a
request: a member there would be outside every domain.

The parts are the level's domains, tightest first: least free CPU, then least free
memory, then name. Placement tries them in that order (placer.py), so a gang takes the
tightest domain it fits, and the roomier domains - whole racks - stay free for gangs
that need them.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.agent import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.domain import (
    Domain,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    PlacementRequest,
)

# The constraint that names the level (PlacementRequest.constraints).
TOPOLOGY = "topology"


class InOneDomain:
    """One part per domain of the requested level, tightest first (module docstring);
    PENDING when no agent has the level."""

    name = "topology"

    def narrow(self, request: PlacementRequest, domain: Domain) -> list[Domain]:
        level = request.constraint(TOPOLOGY)
        if not level:
            return [domain]
        by_domain: dict[str, list[Agent]] = {}
        for agent in domain.agents:
            value = agent.label(level)
            if value:
                by_domain.setdefault(value, []).append(agent)
        if not by_domain:
            raise Pending(
                f"no agent in service has a {level!r} topology label (the session asks "
                f"for one {level}); label the agents or ask for another level",
                permanent=not domain.away,
            )
        parts = [
            Domain(f"{level} {value}", tuple(agents), domain.away)
            for value, agents in by_domain.items()
        ]
        return sorted(parts, key=_tightest)


def _tightest(part: Domain) -> tuple[float, int, str]:
    free_cpu = sum(max(agent.free.cpu, 0.0) for agent in part.agents)
    free_mem = sum(max(agent.free.mem, 0) for agent in part.agents)
    return round(free_cpu, 6), free_mem, part.name
