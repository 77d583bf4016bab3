"""Placement (docs/placement.md): which agent runs which kernel.

single-node puts every kernel on one agent of the resource group; multi-node spreads
them. When nothing fits now, ``Pending`` says why. GPUs are whole devices, never one
device to two containers. An agent's use is read back from its containers' labels.

    request.py   PlacementRequest (built once per session) and Placement (the answer)
    agent.py     Agent, OutOfService, Stock (an agent's images and mount sources), and
                 agent_from_read / agent_of: an agent's read (or its values) -> Agent
    domain.py    the seam: a Domain of agents, and the Rule that narrows one
    group.py     the resource-group rule
    topology.py  the topology rule: every member inside one domain of a level (a rack)
    rules.py     RULES, the rules in the order they apply (add a rule here)
    fit.py       the strategies: all on one agent, or spread; the GPU devices given
    pending.py   what a PENDING says
    placer.py    place(request, agents, out_of_service)

The names below are the package's face: callers import them from here.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.agent import (
    AGENT_NUMBERS,
    Agent,
    OutOfService,
    Stock,
    agent_from_read,
    agent_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.fit import (
    assign_gpu_devices,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.pending import (
    out_of_service_note,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.placer import place
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    Placement,
    PlacementRequest,
)

__all__ = [
    "AGENT_NUMBERS",
    "Agent",
    "OutOfService",
    "Placement",
    "PlacementRequest",
    "Stock",
    "agent_from_read",
    "agent_of",
    "assign_gpu_devices",
    "out_of_service_note",
    "place",
]
