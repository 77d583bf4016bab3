"""What a placement is asked, and what it answers.

A ``PlacementRequest`` is built once per session (from its spec when it is created,
from its queue entry when it waits) and handed unchanged to every placement of it: a
create's, a scheduler pass's, backfill's and preemption's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    MODES,
    Kernel,
    SessionSpec,
)

# The constraint naming the topology level the members stay inside one domain of
# (topology.py; SessionSpec.topology), and the one naming the narrower levels whose
# domains are tried first (comma-separated, narrowest first: a preferred request that
# has widened, session/topology_request.py).
TOPOLOGY = "topology"
TOPOLOGY_FIRST = "topology_first"
# The agents a gang starting again ran on (comma-separated): the domains holding them are
# tried first, so a restart stays local when it fits (steps/restarts.py).
TOPOLOGY_HOME = "topology_home"


@dataclass(frozen=True)
class TopologyAsk:
    """What a placement keeps to of a session's topology now: the level (""
    for none), the narrower levels tried first (a preferred level that widened,
    session/topology_request.py: widening) and the agents of its last attempt."""

    level: str = ""
    first: tuple[str, ...] = ()
    home: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlacementRequest:
    """The kernels to place, in kernel order (main1 first), the mode asked for, the
    resource group, and the constraints a rule reads (rules.py): (name, value) pairs,
    the topology level when the session asks for one."""

    kernels: tuple[Kernel, ...]
    mode: str
    resource_group: str
    constraints: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(f"mode: got {self.mode!r}; allowed: {', '.join(MODES)}")
        if not self.kernels:
            raise ValueError("a placement needs at least one kernel")
        object.__setattr__(self, "kernels", tuple(self.kernels))

    @classmethod
    def of(
        cls,
        spec: SessionSpec,
        kernels: Sequence[Kernel],
        topology: TopologyAsk | None = None,
    ) -> PlacementRequest:
        """The request of session ``spec`` whose kernels are ``kernels``; ``topology``:
        what it keeps to now (else the level it asked for)."""
        ask = topology if topology is not None else TopologyAsk(spec.topology)
        constraints = constraints_of(ask.level, ask.first, ask.home)
        return cls(tuple(kernels), spec.mode, spec.resource_group, constraints)

    def constraint(self, name: str) -> str | None:
        """The value of constraint ``name``, None when the request does not set it."""
        return dict(self.constraints).get(name)


def constraints_of(
    topology: str, first: Sequence[str] = (), home: Sequence[str] = ()
) -> tuple[tuple[str, str], ...]:
    """A request's constraints: its topology level, when it names one, the narrower
    levels whose domains it tries first, and, with either, the agents of its last
    attempt."""
    out: tuple[tuple[str, str], ...] = ((TOPOLOGY, topology),) if topology else ()
    out += ((TOPOLOGY_FIRST, ",".join(first)),) if first else ()
    if out and home:
        out += ((TOPOLOGY_HOME, ",".join(sorted(set(home)))),)
    return out


@dataclass(frozen=True)
class Placement:
    """``mode`` is the mode as actually placed; ``assignment`` maps hostname -> agent
    name in kernel order."""

    mode: str
    assignment: dict[str, str] = field(default_factory=dict)

    @property
    def agents(self) -> list[str]:
        """Agents used, in order of first use (the master's agent first)."""
        return list(dict.fromkeys(self.assignment.values()))
