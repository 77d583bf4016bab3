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

:func:`check_tree` checks the operator's topology before anything uses it: the levels,
widest first, and each agent's domain at every level, a rack inside one block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.agent import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.domain import (
    Domain,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    TOPOLOGY,
    TOPOLOGY_FIRST,
    TOPOLOGY_HOME,
    PlacementRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    LEVEL_NAME,
    LEVEL_RULE,
)


class InOneDomain:
    """One part per domain of the requested level, tightest first (module docstring);
    PENDING when no agent has the level. A preferred request that has widened tries the
    domains of the narrower levels it asked for first (``TOPOLOGY_FIRST``), then those
    of the level it keeps to now, then, widened to no level, every agent."""

    name = "topology"

    def narrow(self, request: PlacementRequest, domain: Domain) -> list[Domain]:
        level = request.constraint(TOPOLOGY)
        first = _listed(request.constraint(TOPOLOGY_FIRST))
        if not level and not first:
            return [domain]
        home = set(_listed(request.constraint(TOPOLOGY_HOME)))
        parts = [part for lvl in first for part in domains_of(lvl, domain, home)]
        if not level:
            return [*parts, domain]
        required = domains_of(level, domain, home)
        if not required:
            raise Pending(
                f"no agent in service has a {level!r} topology label (the session asks "
                f"for one {level}); label the agents or ask for another level",
                permanent=not domain.away,
            )
        return parts + required


def domains_of(level: str, domain: Domain, home: set[str] | None = None) -> list[Domain]:
    """The domains of ``level`` among ``domain``'s agents, tightest first, but those
    holding an agent of ``home`` (a restarted gang's last attempt) before the others ([]
    when no agent has the level)."""
    by_domain: dict[str, list[Agent]] = {}
    for agent in domain.agents:
        value = agent.label(level)
        if value:
            by_domain.setdefault(value, []).append(agent)
    parts = [
        Domain(f"{level} {value}", tuple(agents), domain.away, level)
        for value, agents in by_domain.items()
    ]
    ordered = sorted(parts, key=_tightest)
    if not home:
        return ordered
    return sorted(ordered, key=lambda part: not any(a.name in home for a in part.agents))


def _listed(value: str | None) -> list[str]:
    """A constraint's comma-separated names."""
    return [name for name in (value or "").split(",") if name]


def _tightest(part: Domain) -> tuple[float, int, str]:
    free_cpu = sum(max(agent.free.cpu, 0.0) for agent in part.agents)
    free_mem = sum(max(agent.free.mem, 0) for agent in part.agents)
    return round(free_cpu, 6), free_mem, part.name


# At most this many levels (block > rack > node group): deeper trees add little and make
# every PENDING longer.
MAX_LEVELS = 3


def check_tree(
    levels: Sequence[str], declared: Mapping[str, Any]
) -> dict[str, tuple[tuple[str, str], ...]]:
    """The topology labels of each agent (agent -> (level, domain) pairs, widest first),
    checked: ``levels`` (``bai_topology_levels``, widest first) are 1 to MAX_LEVELS
    distinct names; every agent of ``declared`` (agent -> its ``bai_topology``) has a
    domain at every level and no other key; and each domain lies inside one domain of the
    level above it (a rack in one block). No levels: no topology, and an agent that
    declares one is an error too. SpecError names the agent and what to change."""
    names = list(levels or ())
    if len(names) > MAX_LEVELS or len(set(names)) != len(names):
        raise SpecError(
            f"bai_topology_levels: got {names!r}; give 1 to {MAX_LEVELS} distinct levels, "
            f"widest first (e.g. [block, rack])"
        )
    for name in names:
        if not isinstance(name, str) or not LEVEL_NAME.match(name):
            raise SpecError(f"bai_topology_levels: {name!r} is not a level name ({LEVEL_RULE})")
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    parent: dict[tuple[str, str], str] = {}  # (level, domain) -> its domain one level up
    for agent in sorted(declared):
        given = declared[agent]
        if not names:
            if given:
                raise SpecError(
                    f"{agent}: bai_topology is set but bai_topology_levels is not; name the "
                    f"levels (widest first) in group_vars/all.yml"
                )
            continue
        if not isinstance(given, Mapping):
            raise SpecError(
                f"{agent}: bai_topology must map each level ({', '.join(names)}) to the "
                f"agent's domain there; got {given!r}"
            )
        unknown = sorted(str(k) for k in given if k not in names)
        missing = [name for name in names if not str(given.get(name) or "").strip()]
        if unknown or missing:
            what = [f"no {', '.join(missing)}"] if missing else []
            what += [f"unknown level(s) {', '.join(unknown)}"] if unknown else []
            raise SpecError(
                f"{agent}: bai_topology has {'; '.join(what)}; every agent needs a domain "
                f"at each of bai_topology_levels ({', '.join(names)})"
            )
        pairs = tuple((name, str(given[name]).strip()) for name in names)
        for (above, outer), (level, inner) in zip(pairs, pairs[1:]):
            seen = parent.setdefault((level, inner), outer)
            if seen != outer:
                raise SpecError(
                    f"{agent}: {level} {inner} is in {above} {outer} here but in {above} "
                    f"{seen} on another agent; a {level} lies in one {above}"
                )
        out[agent] = pairs
    return out
