"""Admission (docs/placement.md, "Admission"): what an agent lets itself run.

The session ledger decides where a session should go; the agent decides whether it may
run there. Every create or start of a session container is admitted on the agent, under a
lock on its engine, against what the agent offers and **every session container that
exists on the engine for that agent, in any state** (running, paused, restarting, created
or stopped): a session holds what it was given until it is destroyed. So nothing the
ledger gets wrong (a reservation that expired under a create still running, a second
ledger, a kept read gone stale, two inventory names for one host) can give one CPU,
byte of memory or GPU device to two sessions: the engine's own list of containers is the
truth, and the agent refuses what does not fit in it.

An agent's identity (which engine, which slot of it) is agent_identity.py's.

Pure (standard library only): the modules list the containers and hold the lock.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT_ID,
    LABEL_CPU,
    LABEL_LEDGER,
    LABEL_MEM,
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import ContainerRow
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import (
    LABEL_GPU_DEVICES,
    format_device_label,
    offered_gpus,
    parse_device_label,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    slot_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    agent_capacity,
    label_float,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    CPU_EPSILON,
    Resources,
    format_cpu,
    format_mem,
)

# Where an agent's engine lock lives unless a module is told otherwise (a tmpfs: the
# kernel drops the lock with the process, and nothing of it needs to outlive a boot).
DEFAULT_LOCK_DIR = "/run/bai-cluster"


def lock_path(lock_dir: str, engine_id: str) -> str:
    """The admission lock of an engine: every create or start of a session container,
    and every change of the agent's availability, on that engine takes it."""
    digest = hashlib.sha256(engine_id.encode()).hexdigest()[:16]
    return os.path.join(lock_dir or DEFAULT_LOCK_DIR, f"admission-{digest}.lock")


@dataclass(frozen=True)
class Offer:
    """What an agent offers to session containers."""

    cpu: float
    mem: int
    gpu_devices: tuple[int, ...] = ()

    def describe(self) -> str:
        gpus = format_device_label(self.gpu_devices) or "none"
        return f"cpu {format_cpu(self.cpu)}, mem {format_mem(self.mem)}, GPU devices {gpus}"


def offer_of(
    resources: Mapping[str, Any] | None,
    info: Mapping[str, Any],
    gpu_facts: Mapping[str, Any] | None,
) -> tuple[Offer, dict[str, Any]]:
    """What an agent offers: the inventory's ``bai_agent_resources`` (``resources``) where
    given, else what the engine reports (``docker info``: NCPU, MemTotal); GPU devices as
    ``offered_gpus`` rules (detected ones win). Also returns ``offered_gpus``' answer
    (vendor, source, warning). Raises SpecError (resources) or GpuError."""
    capacity = agent_capacity(
        resources, ncpu=int(info.get("NCPU") or 0), mem_total=int(info.get("MemTotal") or 0)
    )
    declared = capacity.gpu if resources and resources.get("gpu") is not None else None
    gpus = offered_gpus(gpu_facts or {}, declared)
    return Offer(capacity.cpu, capacity.mem, tuple(gpus["devices"])), gpus


@dataclass(frozen=True)
class Holding:
    """One session container (existing, or asked for) and what it was given."""

    container: str
    session: str
    session_id: str
    state: str
    cpu: float
    mem: int
    gpu_devices: tuple[int, ...] = ()


@dataclass(frozen=True)
class Decision:
    """The agent's answer: ``admitted``, or ``reason`` says why not."""

    admitted: bool
    reason: str = ""


def of_slot(containers: Iterable[ContainerRow], slot: str) -> list[ContainerRow]:
    """The session containers of one agent slot, from an engine's container list
    (:meth:`ContainerRow.of_engine`), whatever their state. Containers without
    LABEL_AGENT_ID (made before it existed) count for every slot."""
    found = []
    for row in containers:
        identity = row.label(LABEL_AGENT_ID)
        if LABEL_SESSION in row.labels and (identity is None or slot_of(identity) == slot):
            found.append(row)
    return found


def holdings(containers: Iterable[ContainerRow], slot: str) -> list[Holding]:
    """What each session container of one agent slot holds (``of_slot``)."""
    return [
        Holding(
            container=row.name,
            session=row.label(LABEL_SESSION) or "",
            session_id=row.label(LABEL_SESSION_ID) or "",
            state=row.state.lower(),
            cpu=label_float(row.label(LABEL_CPU) or ""),
            mem=int(label_float(row.label(LABEL_MEM) or "")),
            gpu_devices=tuple(parse_device_label(row.label(LABEL_GPU_DEVICES))),
        )
        for row in of_slot(containers, slot)
    ]


def foreign(containers: Iterable[ContainerRow], ledgers: Iterable[str]) -> dict[str, str]:
    """Sessions on an engine (any slot) that another session ledger counts: session name ->
    that ledger's identity. ``ledgers``: this ledger's identity and the ones it adopted.
    Containers without LABEL_LEDGER (made before it existed) belong to any ledger; with
    no ``ledgers`` (an identity not known yet) nothing is foreign."""
    own = {str(x) for x in ledgers if x}
    found: dict[str, str] = {}
    if not own:
        return found
    for row in containers:
        ledger = row.label(LABEL_LEDGER)
        if LABEL_SESSION in row.labels and ledger and ledger not in own:
            found[row.labels[LABEL_SESSION]] = ledger
    return found


def foreign_text(found: Mapping[str, str], limit: int = 5) -> str:
    """'session(s) a, b counted by another session ledger (ID)'."""
    names = sorted(found)
    shown = ", ".join(names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )
    ids = ", ".join(sorted(set(found.values())))
    return f"session(s) {shown} counted by another session ledger ({ids})"


# What to do about another ledger's sessions: the end of both refusals (the ledger's,
# before placing; the agent's, in its admission).
ADOPT_ADVICE = (
    "Create through that ledger (the inventory that made them), or, if it is gone for "
    "good, adopt its sessions: bai-cluster session reconcile --adopt-ledger ID"
)


def admit(offer: Offer, held: Sequence[Holding], request: Sequence[Holding]) -> Decision:
    """Whether ``request`` (containers to create or start) fits on an agent that offers
    ``offer`` and where ``held`` (every other session container of the agent, any state)
    exists. CPUs (with an epsilon), memory in bytes, and GPU devices: each asked device
    offered, held by no other container and asked for once."""
    used = Resources(round(sum(h.cpu for h in held), 6), sum(h.mem for h in held), 0)
    taken = {d for h in held for d in h.gpu_devices}
    ask = Resources(round(sum(r.cpu for r in request), 6), sum(r.mem for r in request), 0)
    short = []
    if used.cpu + ask.cpu > offer.cpu + CPU_EPSILON:
        short.append(f"cpu (free {format_cpu(max(offer.cpu - used.cpu, 0.0))})")
    if used.mem + ask.mem > offer.mem:
        short.append(f"mem (free {format_mem(max(offer.mem - used.mem, 0))})")
    asked: list[int] = [d for r in request for d in r.gpu_devices]
    twice = sorted({d for d in asked if asked.count(d) > 1})
    missing = sorted(set(asked) - set(offer.gpu_devices))
    busy = sorted(set(asked) & taken)
    if missing:
        short.append(f"GPU device(s) {format_device_label(missing)} (not offered)")
    if busy:
        short.append(f"GPU device(s) {format_device_label(busy)} (held)")
    if twice:
        short.append(f"GPU device(s) {format_device_label(twice)} (asked twice)")
    if not short:
        return Decision(True)
    reason = (
        f"it offers {offer.describe()}; {holders_text(held)}; asked for "
        f"cpu {format_cpu(ask.cpu)}, mem {format_mem(ask.mem)}"
        + (f", GPU devices {format_device_label(asked)}" if asked else "")
        + f"; short of {', '.join(short)}"
    )
    return Decision(False, reason)


def holders_text(held: Sequence[Holding], limit: int = 8) -> str:
    """'sessions there hold cpu 4, mem 1g, GPU devices 0 (s1: 2 containers, exited; ...)'."""
    if not held:
        return "no session holds any of it"
    by_session: dict[str, list[Holding]] = {}
    for h in held:
        by_session.setdefault(h.session or "?", []).append(h)
    parts = []
    for name, rows in sorted(by_session.items())[:limit]:
        states = ", ".join(sorted({r.state or "?" for r in rows}))
        parts.append(f"{name}: {len(rows)} container(s), {states}")
    if len(by_session) > limit:
        parts.append(f"{len(by_session) - limit} more")
    cpu = round(sum(h.cpu for h in held), 6)
    mem = sum(h.mem for h in held)
    devices = format_device_label(sorted({d for h in held for d in h.gpu_devices})) or "none"
    return (
        f"sessions there hold cpu {format_cpu(cpu)}, mem {format_mem(mem)}, GPU devices "
        f"{devices} ({'; '.join(parts)})"
    )
