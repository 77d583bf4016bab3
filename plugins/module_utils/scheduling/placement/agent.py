"""An agent as placement sees it: its capacity, what its session containers were given,
its GPU devices and its labels; and the one place an agent's read becomes one.

Reads come from bai_agent_info (scheduling/ledger/capacity.py counts the containers' labels),
the ledger's kept reads and hints (kept_reads.py) or a playbook's ``agents`` option:
whichever it is, :func:`agent_from_read` makes the ``Agent``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.model import Resources


@dataclass(frozen=True)
class Agent:
    """A compute agent: total capacity plus what running session containers were given.

    GPUs: ``gpu_devices`` are the device indices the agent offers (None: anonymous
    ``0..gpu-1``) and ``gpu_in_use`` those that session containers hold (their
    LABEL_GPU_DEVICES). Free GPUs are the offered devices nobody holds, and never more
    than ``gpu - used_gpu`` (containers labelled with a GPU count but no devices count too).

    ``labels``: the agent's labels as (key, value) pairs, sorted: what a placement rule
    may group agents by (rules.py).
    """

    name: str
    group: str
    cpu: float
    mem: int
    gpu: int
    used_cpu: float = 0.0
    used_mem: int = 0
    used_gpu: int = 0
    gpu_devices: tuple[int, ...] | None = None
    gpu_in_use: tuple[int, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()

    def label(self, key: str) -> str | None:
        """The value of label ``key``, None when the agent has no such label."""
        return self.label_map.get(key) if self.labels else None

    # Cached: placement over thousands of agents reads these many times (the dataclass is
    # frozen, so they cannot go stale).
    @cached_property
    def label_map(self) -> dict[str, str]:
        """``labels`` as a mapping (a scheduler pass asks every agent for its topology
        label once per queued session)."""
        return dict(self.labels)

    @cached_property
    def devices(self) -> tuple[int, ...]:
        """The GPU device indices this agent offers, sorted."""
        if self.gpu_devices is None:
            return tuple(range(int(self.gpu)))
        return tuple(sorted(set(int(i) for i in self.gpu_devices)))

    @cached_property
    def free_devices(self) -> tuple[int, ...]:
        """Offered GPU devices that no session container holds."""
        held = set(int(i) for i in self.gpu_in_use)
        return tuple(i for i in self.devices if i not in held)

    @cached_property
    def total(self) -> Resources:
        return Resources(float(self.cpu), int(self.mem), int(self.gpu))

    @cached_property
    def free(self) -> Resources:
        """Capacity minus use; may be negative if an agent is overcommitted."""
        gpu = int(self.gpu) - int(self.used_gpu)
        if self.gpu or self.gpu_devices:
            gpu = min(gpu, len(self.free_devices))
        cpu = round(float(self.cpu) - float(self.used_cpu), 6)  # as Resources.__sub__
        return Resources(cpu, int(self.mem) - int(self.used_mem), gpu)


@dataclass(frozen=True)
class Stock:
    """What an agent is known to have of what a session asks for: per image reference and
    per mount source, whether it is there (bai_agent_info's ``images`` and ``paths``).
    What it was not asked about is not known, and never refuses."""

    images: Mapping[str, bool] = field(default_factory=dict)
    paths: Mapping[str, bool] = field(default_factory=dict)

    def lacks_image(self, ref: str) -> bool:
        return self.images.get(ref) is False

    def lacks_path(self, path: str) -> bool:
        return self.paths.get(path) is False


@dataclass(frozen=True)
class OutOfService:
    """An agent placement may not use now (paused, drained, down), and why: it is kept
    out of ``place``'s agents, and named by its PENDING messages (docs/operations.md)."""

    name: str
    group: str
    why: str


AGENT_NUMBERS = ("cpu", "mem", "gpu", "used_cpu", "used_mem", "used_gpu")


def agent_from_read(raw: Mapping[str, Any], where: str) -> Agent:
    """The ``Agent`` of one read: name, group, the numbers of AGENT_NUMBERS (missing: 0),
    gpu_devices and gpu_in_use (lists of device indices) and labels (a mapping). A
    SpecError names ``where`` (e.g. ``agents[2]``) and says what is wrong."""
    get = raw.get
    return agent_of(
        where,
        raw,
        name=get("name"),
        group=get("group"),
        numbers=[get(key) for key in AGENT_NUMBERS],
        gpu_devices=get("gpu_devices"),
        gpu_in_use=get("gpu_in_use"),
        labels=get("labels"),
    )


def agent_of(
    where: str,
    shown: Any,
    *,
    name: Any,
    group: Any,
    numbers: Sequence[Any],
    gpu_devices: Any,
    gpu_in_use: Any,
    labels: Any,
) -> Agent:
    """The ``Agent`` of a read's values (``numbers`` in AGENT_NUMBERS' order), checked as
    :func:`agent_from_read` says; a SpecError shows ``shown`` (the read)."""
    if not name:
        raise SpecError(f"{where}: 'name' is required")
    try:
        cpu, mem, gpu, used_cpu, used_mem, used_gpu = (value or 0 for value in numbers)
        devices = _indices(gpu_devices)
        return Agent(
            name=str(name),
            group=str(group or "default"),
            cpu=float(cpu),
            mem=int(mem),
            gpu=len(devices) if devices is not None else int(gpu),
            used_cpu=float(used_cpu),
            used_mem=int(used_mem),
            used_gpu=int(used_gpu),
            gpu_devices=devices,
            gpu_in_use=_indices(gpu_in_use) or (),
            labels=_labels(labels),
        )
    except (TypeError, ValueError):
        raise SpecError(
            f"{where} ({name}): cpu, mem, gpu and used_* must be numbers, "
            f"gpu_devices and gpu_in_use lists of device indices >= 0, labels a mapping of "
            f"strings; got {shown!r}"
        ) from None


def _indices(value: Any) -> tuple[int, ...] | None:
    """GPU device indices from a list (None stays None: anonymous devices)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError("not a list")
    found = []
    for item in value:
        if isinstance(item, bool) or int(item) < 0 or int(item) != float(item):
            raise ValueError(f"not a device index: {item!r}")
        found.append(int(item))
    return tuple(sorted(set(found)))


def _labels(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise TypeError("not a mapping")
    return tuple(sorted((str(k), str(v)) for k, v in value.items()))
