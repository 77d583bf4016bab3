"""What one read says of its agent (:class:`AgentState`): bai_agent_info's ``agent``.

Its identity, resource group, capacity and what its session containers use, its GPU
devices and those held, and its own availability record. An agent's read
(agent_read.AgentRead) and the ledger's kept read of it (records.KeptRead) carry one; a
hint (kept_reads.hint) makes one from the inventory's declaration. Placement makes its
``Agent`` of it (placement/agent.py: agent_from_read). A key this toolkit does not know
(``gpu_vendor``, ``rdma_devices``, ``isolation``...) is kept as it came, so a kept read
is written back byte for byte (json_record.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.json_record import (
    Record,
)


@dataclass(kw_only=True)
class AgentState(Record):
    """An agent as one read saw it (module docstring). ``gpu_devices`` None: not known
    (anonymous devices ``0..gpu-1``, or a hint without a read)."""

    KIND: ClassVar[str] = "read's agent"

    name: str = ""
    id: str = ""
    group: str = "default"
    cpu: float = 0.0
    mem: int = 0
    gpu: int = 0
    used_cpu: float = 0.0
    used_mem: int = 0
    used_gpu: int = 0
    gpu_devices: list[int] | None = None
    gpu_in_use: list[int] = field(default_factory=list)
    availability: dict[str, Any] | None = None

    def copy(self) -> AgentState:
        """A copy that can be changed without changing this one (its fields set anew;
        the values themselves are shared, as a dict's copy shares them)."""
        out = AgentState.__new__(AgentState)
        out.__dict__.update(self.__dict__)
        out.__dict__["extra"] = dict(self.extra)
        out.__dict__["absent"] = set(self.absent)
        return out

    def using(self, cpu: float, mem: int, gpu: int, devices: list[int]) -> AgentState:
        """A copy whose session containers use ``cpu``, ``mem``, ``gpu`` and hold GPU
        ``devices``."""
        out = self.copy()
        out.__dict__.update(used_cpu=cpu, used_mem=mem, used_gpu=gpu, gpu_in_use=devices)
        if out.absent:  # set now, so in the document
            out.absent -= _USE
        return out


_USE = frozenset({"used_cpu", "used_mem", "used_gpu", "gpu_in_use"})
