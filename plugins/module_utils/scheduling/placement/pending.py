"""What a PENDING says when a request does not fit now: what it needs, what each agent
has free, and whether waiting can ever help (docs/placement.md, "PENDING").
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import format_device_label
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.agent import (
    Agent,
    OutOfService,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.domain import (
    Domain,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.fit import (
    capacity,
    room_key,
    total_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.fit import (
    how_many as fit_count,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    CPU_EPSILON,
    Kernel,
    Resources,
)

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


def check_never_fits(kernels: Sequence[Kernel], group: list[Agent], where: str) -> None:
    """A kernel bigger than every agent's *total* capacity will wait forever. ``where``
    names the agents: "resource group 'gpu'", or a topology domain ("rack r1")."""
    for kernel in kernels:
        if not any(kernel.resources.fits_in(agent.total) for agent in group):
            sizes = _listed(
                (f"{a.name}: {a.total.describe()}" for a in _roomiest(group, total=True)),
                len(group),
            )
            raise Pending(
                f"container {kernel.hostname} needs {kernel.resources.describe()}, more "
                f"than any agent in {where} has in total "
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
        REPORT_AGENTS, group, key=lambda a: (-room(a).gpu, *room_key(a.name, room(a)))
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


def single_node_pending(
    kernels: Sequence[Kernel], group: list[Agent], where: str, whole_group: bool = True
) -> Pending:
    need = total_of(kernels)
    never = whole_group and not any(need.fits_in(agent.total) for agent in group)
    hint = ""
    if never and need.fits_in(capacity(group)):
        hint = "; it can never fit on one agent, use mode multi-node to spread it"
    elif never:
        hint = "; it can never fit, not even spread over the whole group"
    return Pending(
        f"no agent in {where} can hold all {len(kernels)} "
        f"containers on one node (they need {need.describe()} together; "
        f"{_free_report(group, need)}){hint}{_gpu_note(need.gpu, group)}",
        permanent=never,
    )


def multi_node_pending(
    kernels: Sequence[Kernel], group: list[Agent], where: str, whole_group: bool = True
) -> Pending:
    need = total_of(kernels)
    never = whole_group and not need.fits_in(capacity(group))
    hint = f"; it can never fit in {where}" if never else ""
    per_kernel = kernels[0].resources if len({k.resources for k in kernels}) == 1 else None
    each = f" ({per_kernel.describe()} each)" if per_kernel else ""
    free = _listed((f"{a.name}: {a.free.describe()} free" for a in _roomiest(group)), len(group))
    return Pending(
        f"the {len(kernels)} containers{each} do not fit across the agents of {where} "
        f"(they need {need.describe()} together; {free})"
        f"{hint}{_gpu_note(need.gpu, group)}",
        permanent=never,
    )


def in_no_part(missed: Sequence[tuple[Domain, Pending]], kernels: Sequence[Kernel]) -> Pending:
    """The PENDING of a request that fits in none of the parts the rules left (each with
    its own PENDING, best part first): the best part's alone when there was one part;
    for topology domains, how many of the members each holds now, roomiest first, and
    what the roomiest lacks; else the first three parts' reasons (each names its part).
    Permanent only when it is in every part."""
    if not missed:
        return Pending("no agent may run this session")
    first = missed[0][1]
    if len(missed) == 1 or not missed[0][0].name:
        return first
    permanent = all(exc.permanent for _part, exc in missed)
    level = missed[0][0].level
    if level:
        return _in_no_domain(level, missed, kernels, permanent)
    shown = "; ".join(exc.reason for _part, exc in missed[:3])
    more = f"; and {len(missed) - 3} more" if len(missed) > 3 else ""
    return Pending(
        f"it fits in no single one of {len(missed)} domains: {shown}{more}",
        permanent=permanent,
        kind=first.kind,
    )


# Topology domains a PENDING names with what each holds.
REPORT_DOMAINS = 6


def _in_no_domain(
    level: str, missed: Sequence[tuple[Domain, Pending]], kernels: Sequence[Kernel], permanent: bool
) -> Pending:
    """'needs its 4 containers in one rack; room now for 3 in rack r2, 2 in rack r1 (rack
    r2: <what it lacks>)'."""
    held = [(fit_count(kernels, list(part.agents)), part, exc) for part, exc in missed]
    held.sort(key=lambda row: (-row[0], row[1].name))
    shown = ", ".join(f"{n} in {part.name}" for n, part, _exc in held[:REPORT_DOMAINS])
    more = f", and {len(held) - REPORT_DOMAINS} more {level}s" if len(held) > REPORT_DOMAINS else ""
    _n, best, why = held[0]
    return Pending(
        f"needs its {len(kernels)} containers in one {level}; room now for {shown}{more} "
        f"({best.name}: {why.reason})",
        permanent=permanent,
        kind=why.kind,
    )
