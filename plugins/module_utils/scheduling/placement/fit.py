"""The strategies that place a request's kernels on a domain's agents (domain.py): all on
one agent (single-node, and multi-node when one agent holds them all), or spread
(multi-node); and the GPU devices each kernel is given there.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    GpuAllocationError,
    Pending,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import allocate_devices
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.agent import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    Placement,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    MODE_SINGLE,
    ZERO,
    Kernel,
    Resources,
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


def total_of(kernels: Iterable[Kernel]) -> Resources:
    total = ZERO
    for kernel in kernels:
        total = total + kernel.resources
    return total


def capacity(group: list[Agent]) -> Resources:
    """The group's total capacity, ignoring what is in use."""
    total = ZERO
    for agent in group:
        total = total + agent.total
    return total


def room_key(agent_name: str, left: Resources) -> tuple[float, int, str]:
    """Sort key: most CPU left first, then most memory, then name (deterministic)."""
    return (-left.cpu, -left.mem, agent_name)


def on_one(kernels: Sequence[Kernel], group: list[Agent]) -> Placement | None:
    need = total_of(kernels)
    fitting = [a for a in group if need.fits_in(a.free)]
    if not fitting:
        return None
    best = min(fitting, key=lambda a: room_key(a.name, a.free - need))
    return Placement(MODE_SINGLE, {k.hostname: best.name for k in kernels})


def spread(kernels: Sequence[Kernel], group: list[Agent]) -> dict[str, str] | None:
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
    """Each kernel in order to the agent with the most room left that fits it, or None
    when one does not fit."""
    result = dict(_worst_fit_steps(kernels, group))
    return result if len(result) == len(kernels) else None


def how_many(kernels: Sequence[Kernel], group: list[Agent]) -> int:
    """How many of ``kernels``, in kernel order, fit on ``group``'s free room now (as
    worst-fit places them): what a PENDING says a topology domain holds."""
    return sum(1 for _step in _worst_fit_steps(kernels, group))


def _worst_fit_steps(kernels: Sequence[Kernel], group: list[Agent]) -> Iterator[tuple[str, str]]:
    """(hostname, agent) for each kernel in order, to the agent with the most room left
    that fits it, until one does not fit: a heap by room, popped until an agent fits (the
    others go back), so a placement over thousands of agents costs about a log per
    kernel, not a scan."""
    heap = [(room_key(agent.name, agent.free), agent.free) for agent in group]
    heapq.heapify(heap)
    for kernel in kernels:
        need = kernel.resources
        skipped = []
        while heap and not need.fits_in(heap[0][1]):
            skipped.append(heapq.heappop(heap))
        if not heap:
            return
        (_cpu, _mem, name), room = heapq.heappop(heap)
        left = room - need
        heapq.heappush(heap, (room_key(name, left), left))
        for item in skipped:
            heapq.heappush(heap, item)
        yield kernel.hostname, name


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
