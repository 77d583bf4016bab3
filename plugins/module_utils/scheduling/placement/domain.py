"""The seam of placement: a rule narrows where a request may be placed.

A ``Domain`` is a set of agents that one session's members must all be placed among,
with the agents of it that are out of service now. Placement starts from one domain,
every agent it was given, and asks each rule of ``rules.RULES`` in turn to narrow each
domain into the parts the request may use, best first; the mode's strategy (fit.py)
then places the request in the first part where it fits.

A rule that does not apply to a request returns the domain unchanged. A rule that
leaves no part raises ``Pending`` saying why (errors.py), as the resource-group rule
does when the group has no agent. docs/development.md says how to add one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.agent import (
    Agent,
    OutOfService,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    PlacementRequest,
)


@dataclass(frozen=True)
class Domain:
    """Agents a request's members may be placed among (sorted by name), those of them
    out of service, the domain's name in messages ("" for every agent given: "rack r1"
    for a topology domain) and its topology level ("" when it is none: "rack")."""

    name: str
    agents: tuple[Agent, ...]
    away: tuple[OutOfService, ...] = ()
    level: str = ""


class Rule(Protocol):
    """One placement rule: its name and how it narrows a domain."""

    name: str

    def narrow(self, request: PlacementRequest, domain: Domain) -> list[Domain]:
        """The parts of ``domain`` that ``request`` may be placed in, best first."""
