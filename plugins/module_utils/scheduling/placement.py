"""Placement (docs/placement.md): which agent runs which kernel.

single-node puts every kernel on one agent of the resource group; multi-node spreads
them. When nothing fits now, ``Pending`` says why. GPUs are whole devices, never one
device to two containers. An agent's use is read back from its containers' labels.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_NO_AGENTS,
    GpuAllocationError,
    Pending,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import (
    allocate_devices,
    format_device_label,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    CPU_EPSILON,
    MODE_MULTI,
    MODE_SINGLE,
    MODES,
    ZERO,
    Kernel,
    Resources,
)


@dataclass(frozen=True)
class Agent:
    """A compute agent: total capacity plus what running session containers were given.

    GPUs: ``gpu_devices`` are the device indices the agent offers (None: anonymous
    ``0..gpu-1``) and ``gpu_in_use`` those that session containers hold (their
    LABEL_GPU_DEVICES). Free GPUs are the offered devices nobody holds, and never more
    than ``gpu - used_gpu`` (containers labelled with a GPU count but no devices count too).
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

    # Cached: placement over thousands of agents reads these many times (the dataclass is
    # frozen, so they cannot go stale).
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
class OutOfService:
    """An agent placement may not use now (paused, drained, down), and why: it is kept
    out of ``place``'s agents, and named by its PENDING messages (docs/operations.md)."""

    name: str
    group: str
    why: str


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


def place(
    kernels: Sequence[Kernel],
    agents: Sequence[Agent],
    *,
    mode: str,
    resource_group: str,
    out_of_service: Sequence[OutOfService] = (),
) -> Placement:
    """Choose an agent for every kernel, or raise ``Pending`` (nothing is half-placed).

    single-node: every kernel on the one agent that fits their sum and keeps the most
    free capacity (free CPU, then free memory, then name). multi-node: the same if one
    agent fits all (the result then says single-node); else kernels are spread, in
    kernel order, each to the agent with the most capacity left that fits it.

    ``agents`` are those placement may use; ``out_of_service`` the group's others
    (paused, drained, down). Their room is never counted, so every mode, and the
    collapse of a multi-node session onto one agent, passes over them; a PENDING names
    them and is never permanent while the group has any (they may come back).
    """
    if mode not in MODES:
        raise SpecError(f"mode: got {mode!r}; allowed: {', '.join(MODES)}")
    if not kernels:
        raise ValueError("place() needs at least one kernel")
    away = sorted((a for a in out_of_service if a.group == resource_group), key=lambda a: a.name)
    try:
        group = _group_agents(agents, resource_group, away)
        # Whether "never" can be said: an agent out of service may be bigger.
        whole_group = not away
        if whole_group:
            _check_never_fits(kernels, group, resource_group)
        whole = _place_on_one(kernels, group)
        if whole is not None:
            return whole
        if mode == MODE_SINGLE:
            raise _single_node_pending(kernels, group, resource_group, whole_group)
        assignment = _spread(kernels, group)
        if assignment is None:
            raise _multi_node_pending(kernels, group, resource_group, whole_group)
    except Pending as exc:
        if not away:
            raise
        # What is out of service may come back: waiting can help.
        raise Pending(
            exc.reason + out_of_service_note(away), permanent=False, kind=exc.kind
        ) from None
    used = set(assignment.values())
    return Placement(MODE_MULTI if len(used) > 1 else MODE_SINGLE, assignment)


# Agents out of service a PENDING message names one by one.
REPORT_AWAY = 8


def out_of_service_note(away: Sequence[OutOfService]) -> str:
    """'; not counted, as they take no new sessions: agent2 paused by bob ...: upgrade'."""
    if not away:
        return ""
    parts = [f"{a.name} {a.why}" for a in away[:REPORT_AWAY]]
    if len(away) > REPORT_AWAY:
        parts.append(f"and {len(away) - REPORT_AWAY} more")
    return (
        f"; not counted, as they take no new sessions: {'; '.join(parts)} "
        f"(bai-cluster agent activate NAME puts a paused agent back in service)"
    )


def _group_agents(
    agents: Sequence[Agent], resource_group: str, away: Sequence[OutOfService] = ()
) -> list[Agent]:
    counts = Counter(agent.name for agent in agents)
    duplicates = sorted(name for name, n in counts.items() if n > 1)
    if duplicates:
        raise ValueError(f"agent name(s) listed more than once: {', '.join(duplicates)}")
    group = sorted((a for a in agents if a.group == resource_group), key=_by_name)
    if not group and away:
        raise Pending(
            f"no agent of resource group {resource_group!r} is in service", kind=WAIT_NO_AGENTS
        )
    if not group:
        groups = sorted({agent.group for agent in agents})
        known = ", ".join(repr(g) for g in groups) if groups else "none (no agents at all)"
        raise Pending(
            f"resource group {resource_group!r} has no agents; groups with agents: {known}",
            permanent=True,
        )
    return group


def _by_name(agent: Agent) -> str:
    return agent.name


def _check_never_fits(kernels: Sequence[Kernel], group: list[Agent], resource_group: str) -> None:
    """A kernel bigger than every agent's *total* capacity will wait forever."""
    for kernel in kernels:
        if not any(kernel.resources.fits_in(agent.total) for agent in group):
            sizes = _listed(
                (f"{a.name}: {a.total.describe()}" for a in _roomiest(group, total=True)),
                len(group),
            )
            raise Pending(
                f"container {kernel.hostname} needs {kernel.resources.describe()}, more "
                f"than any agent in resource group {resource_group!r} has in total "
                f"({sizes}); it can never fit{_gpu_note(kernel.resources.gpu, group)}",
                permanent=True,
            )


def _gpu_note(need_gpu: int, group: list[Agent]) -> str:
    """For a PENDING message when GPUs are asked for: each agent's GPU devices, which are
    free, and where the numbers come from. Empty when no GPU is asked for."""
    if need_gpu <= 0:
        return ""
    parts = []
    for agent in _roomiest(group):
        devices = agent.devices
        if not devices:
            parts.append(f"{agent.name} has no GPU")
            continue
        free = agent.free_devices[: max(agent.free.gpu, 0)]
        parts.append(
            f"{agent.name} has GPU devices {format_device_label(devices)}, free: "
            f"{format_device_label(free) or 'none'}"
        )
    return (
        f"; GPUs asked for: {need_gpu}; {_listed(parts, len(group))} (GPUs are the devices "
        f"detected on each agent, else its bai_agent_resources.gpu)"
    )


def assign_gpu_devices(
    kernels: Sequence[Kernel], assignment: Mapping[str, str], agents: Sequence[Agent]
) -> dict[str, list[int]]:
    """hostname -> the GPU device indices of its agent that it is given (``[]`` for none).

    Per agent, ``allocate_devices`` picks among the agent's free devices, in kernel
    order and biggest requests first; no device goes to two containers and none that a
    session container already holds is given out. ``place`` only chooses agents whose
    free GPU count covers their share, so this does not fail for a placement it made;
    if it does (inconsistent input) it raises ``Pending``.
    """
    by_name = {agent.name: agent for agent in agents}
    result: dict[str, list[int]] = {kernel.hostname: [] for kernel in kernels}
    for name in dict.fromkeys(assignment[k.hostname] for k in kernels):
        share = [(k.hostname, k.resources.gpu) for k in kernels if assignment[k.hostname] == name]
        if not any(count for _hostname, count in share):
            continue
        agent = by_name[name]
        free = agent.free_devices[: max(agent.free.gpu, 0)]
        try:
            result.update(allocate_devices(free, (), share, agent=f"agent {name}"))
        except GpuAllocationError as exc:
            raise Pending(exc.reason) from None
    return result


def _total(kernels: Iterable[Kernel]) -> Resources:
    total = ZERO
    for kernel in kernels:
        total = total + kernel.resources
    return total


def _capacity(group: list[Agent]) -> Resources:
    """The group's total capacity, ignoring what is in use."""
    total = ZERO
    for agent in group:
        total = total + agent.total
    return total


def _room_key(agent_name: str, left: Resources) -> tuple[float, int, str]:
    """Sort key: most CPU left first, then most memory, then name (deterministic)."""
    return (-left.cpu, -left.mem, agent_name)


def _place_on_one(kernels: Sequence[Kernel], group: list[Agent]) -> Placement | None:
    need = _total(kernels)
    fitting = [a for a in group if need.fits_in(a.free)]
    if not fitting:
        return None
    best = min(fitting, key=lambda a: _room_key(a.name, a.free - need))
    return Placement(MODE_SINGLE, {k.hostname: best.name for k in kernels})


def _spread(kernels: Sequence[Kernel], group: list[Agent]) -> dict[str, str] | None:
    """Worst-fit in kernel order (spreads load, optimal for equal kernels); if that
    fails, best-fit with the biggest kernels first, which packs mixed roles better;
    if that fails too, a bounded exhaustive search (exact fits, common with GPUs:
    2+2 and 3+3 on agents with 4, 5 and 6 free GPUs defeat both heuristics)."""
    result = _worst_fit(kernels, group)
    if result is None:
        result = _best_fit_decreasing(kernels, group)
    if result is None:
        result = _exhaustive_fit(kernels, group)
    if result is None:
        return None
    return {kernel.hostname: result[kernel.hostname] for kernel in kernels}


# Steps the exhaustive search may take before it gives up (PENDING); ~0.1 s of work.
EXHAUSTIVE_BUDGET = 20000


def _exhaustive_fit(
    kernels: Sequence[Kernel], group: list[Agent], budget: int = EXHAUSTIVE_BUDGET
) -> dict[str, str] | None:
    """Depth-first search over agents, biggest kernels first, skipping agents whose
    room equals one already tried and states already known to fail; None when no
    assignment exists or the budget runs out."""
    order = sorted(
        kernels,
        key=lambda k: (-k.resources.gpu, -k.resources.cpu, -k.resources.mem, k.rank),
    )
    names = [agent.name for agent in group]
    left = [agent.free for agent in group]
    result: dict[str, str] = {}
    failed: set[tuple[int, tuple[Resources, ...]]] = set()
    steps = 0

    def search(i: int) -> bool:
        nonlocal steps
        if i == len(order):
            return True
        steps += 1
        state = (i, tuple(left))
        if steps > budget or state in failed:
            return False
        need = order[i].resources
        tried: set[Resources] = set()
        for j, name in enumerate(names):
            room = left[j]
            if room in tried or not need.fits_in(room):
                continue
            tried.add(room)
            left[j] = room - need
            result[order[i].hostname] = name
            if search(i + 1):
                return True
            left[j] = room
            del result[order[i].hostname]
        failed.add(state)
        return False

    return result if search(0) else None


def _worst_fit(kernels: Sequence[Kernel], group: list[Agent]) -> dict[str, str] | None:
    """Each kernel in order to the agent with the most room left that fits it: a heap
    by room, popped until an agent fits (the others go back), so a placement over
    thousands of agents costs about a log per kernel, not a scan."""
    heap = [(_room_key(agent.name, agent.free), agent.free) for agent in group]
    heapq.heapify(heap)
    result: dict[str, str] = {}
    for kernel in kernels:
        need = kernel.resources
        skipped = []
        while heap and not need.fits_in(heap[0][1]):
            skipped.append(heapq.heappop(heap))
        if not heap:
            return None
        (_cpu, _mem, name), room = heapq.heappop(heap)
        left = room - need
        heapq.heappush(heap, (_room_key(name, left), left))
        for item in skipped:
            heapq.heappush(heap, item)
        result[kernel.hostname] = name
    return result


def _best_fit_decreasing(kernels: Sequence[Kernel], group: list[Agent]) -> dict[str, str] | None:
    left = {agent.name: agent.free for agent in group}
    result: dict[str, str] = {}
    order = sorted(
        kernels,
        key=lambda k: (-k.resources.gpu, -k.resources.cpu, -k.resources.mem, k.rank),
    )
    for kernel in order:
        need = kernel.resources
        fitting = [name for name in left if need.fits_in(left[name])]
        if not fitting:
            return None
        # Best fit: the agent with the least room left that still fits.
        name = min(fitting, key=lambda n: (left[n].cpu, left[n].mem, n))
        left[name] = left[name] - need
        result[kernel.hostname] = name
    return result


def _free_report(group: list[Agent], need: Resources) -> str:
    """'agent1: cpu 1.5, mem 2g, gpu 0 free (short of cpu)' for each agent."""
    parts = []
    for agent in _roomiest(group):
        short = _short_of(need, agent.free)
        note = f" (short of {', '.join(short)})" if short else ""
        parts.append(f"{agent.name}: {agent.free.describe()} free{note}")
    return _listed(parts, len(group))


# Agents a PENDING message describes one by one; a bigger group is summarised.
REPORT_AGENTS = 8


def _roomiest(group: list[Agent], total: bool = False) -> list[Agent]:
    """The agents a message describes: all of a small group in name order, else the
    REPORT_AGENTS with the most room (free, or total capacity)."""
    if len(group) <= REPORT_AGENTS:
        return group
    room = (lambda a: a.total) if total else (lambda a: a.free)
    return heapq.nsmallest(
        REPORT_AGENTS, group, key=lambda a: (-room(a).gpu, *_room_key(a.name, room(a)))
    )


def _listed(parts: Iterable[str], count: int) -> str:
    """Join PARTS with '; ', noting how many of COUNT agents were left out."""
    parts = list(parts)
    more = count - len(parts)
    return "; ".join(parts) + (f"; and {more} more agent(s) with less room" if more > 0 else "")


def _short_of(need: Resources, free: Resources) -> list[str]:
    short = []
    if need.cpu > free.cpu + CPU_EPSILON:
        short.append("cpu")
    if need.mem > free.mem:
        short.append("mem")
    if need.gpu > free.gpu:
        short.append("gpu")
    return short


def _single_node_pending(
    kernels: Sequence[Kernel], group: list[Agent], resource_group: str, whole_group: bool = True
) -> Pending:
    need = _total(kernels)
    never = whole_group and not any(need.fits_in(agent.total) for agent in group)
    hint = ""
    if never and need.fits_in(_capacity(group)):
        hint = "; it can never fit on one agent, use mode multi-node to spread it"
    elif never:
        hint = "; it can never fit, not even spread over the whole group"
    return Pending(
        f"no agent in resource group {resource_group!r} can hold all {len(kernels)} "
        f"containers on one node (they need {need.describe()} together; "
        f"{_free_report(group, need)}){hint}{_gpu_note(need.gpu, group)}",
        permanent=never,
    )


def _multi_node_pending(
    kernels: Sequence[Kernel], group: list[Agent], resource_group: str, whole_group: bool = True
) -> Pending:
    need = _total(kernels)
    never = whole_group and not need.fits_in(_capacity(group))
    hint = "; it can never fit in this group" if never else ""
    per_kernel = kernels[0].resources if len({k.resources for k in kernels}) == 1 else None
    each = f" ({per_kernel.describe()} each)" if per_kernel else ""
    free = _listed((f"{a.name}: {a.free.describe()} free" for a in _roomiest(group)), len(group))
    return Pending(
        f"the {len(kernels)} containers{each} do not fit across the agents of resource "
        f"group {resource_group!r} (they need {need.describe()} together; {free})"
        f"{hint}{_gpu_note(need.gpu, group)}",
        permanent=never,
    )
