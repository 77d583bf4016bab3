"""Per-owner limits (docs/placement.md, "Owners and limits"): how much of the cluster one
owner may hold at once.

``bai_session_policies`` gives, per owner with a default, at most so many sessions at
once, CPUs, memory and GPUs in all (across every resource group), a longest lifetime and
the most gang restarts a batch session may ask for (``session_restarts``)::

    bai_session_policies:
      default: {sessions: 4, cpu: 32, mem: 128g, gpu: 4, lifetime_s: 86400, restarts: 3}
      owners:
        alice: {sessions: 1}        # overrides the default key by key

An owner's entry overrides the default key by key; ``null`` there lifts the default's
limit for that owner; a key absent from both means no limit. A lifetime of 0 is refused
(it would end every session at once); leave the key out for none.

The same entries give the queue's order what it weighs (queue_order.py): ``priority``
(0-100, default 0) and ``share`` (a positive weight of the cluster, default 1), and the
top-level ``queue`` the order itself (``order: fifo`` or ``priority``, the weights and the
half-life)::

    bai_session_policies:
      queue: {order: priority, half_life_s: 604800}
      owners:
        alice: {priority: 50, share: 2}

The check (:func:`refusal`) runs in the same compare-and-swap of the ledger that reserves
the capacity, on the ledger's own sessions, so two creates by one owner cannot both slip
under a limit. Pure: no Ansible, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import (
    parse_count,
    parse_cpu,
    parse_mem,
    reject_unknown,
    require_mapping,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    Resources,
    format_cpu,
    format_mem,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import check_owner

FIELD = "bai_session_policies"
LIMIT_KEYS = ("sessions", "cpu", "mem", "gpu", "lifetime_s", "restarts")
# What the queue's order weighs (queue_order.py), beside the limits; not limits.
STANDING_KEYS = ("priority", "share")


@dataclass(frozen=True)
class Limit:
    """One limit and where it comes from (``default`` or ``owners.NAME``)."""

    value: float
    source: str


@dataclass(frozen=True)
class Limits:
    """An owner's limits, key by key; None: no limit."""

    owner: str
    sessions: Limit | None = None
    cpu: Limit | None = None
    mem: Limit | None = None
    gpu: Limit | None = None
    lifetime_s: Limit | None = None
    restarts: Limit | None = None


@dataclass(frozen=True)
class Usage:
    """What an owner holds: sessions, and the resources of their containers in all."""

    sessions: int = 0
    cpu: float = 0.0
    mem: int = 0
    gpu: int = 0
    names: tuple[str, ...] = ()

    def plus(self, name: str, resources: Resources) -> Usage:
        """This use with one more session of ``resources`` in all."""
        return Usage(
            self.sessions + 1,
            round(self.cpu + resources.cpu, 6),
            self.mem + resources.mem,
            self.gpu + resources.gpu,
            (*self.names, name),
        )


def parse_policies(raw: Any) -> dict[str, dict[str, float | None]]:
    """Validate ``bai_session_policies``: {"default": {key: limit}, "NAME": {...}}, each
    limit a number or None (an owner's None lifts the default's). Raises SpecError naming
    the field."""
    if raw is None:
        return {"default": {}}
    require_mapping(raw, FIELD)
    reject_unknown(raw, ("default", "owners", "queue"), FIELD)
    parsed = {"default": _parse_limits(raw.get("default"), f"{FIELD}.default", owner=False)}
    owners = raw.get("owners")
    if owners is None:
        return parsed
    require_mapping(owners, f"{FIELD}.owners")
    for name, limits in owners.items():
        check_owner(name, f"{FIELD}.owners: the name {name!r}")
        if name == "default":
            raise SpecError(f"{FIELD}.owners: 'default' is not an owner; set {FIELD}.default")
        parsed[name] = _parse_limits(limits, f"{FIELD}.owners.{name}", owner=True)
    return parsed


def _parse_limits(raw: Any, where: str, *, owner: bool) -> dict[str, float | None]:
    if raw is None:
        return {}
    require_mapping(raw, where)
    reject_unknown(raw, LIMIT_KEYS + STANDING_KEYS, where)
    limits: dict[str, float | None] = {}
    for key, value in raw.items():
        field_name = f"{where}.{key}"
        if key in STANDING_KEYS:
            limits[key] = _standing(key, value, field_name)
        elif value is None:
            if not owner:
                raise SpecError(f"{field_name}: got null; leave the key out for no limit")
            limits[key] = None
        elif key == "cpu":
            limits[key] = _cpu_limit(value, field_name)
        elif key == "mem":
            limits[key] = float(parse_mem(value, field_name)) if value != 0 else 0.0
        elif key == "lifetime_s":
            seconds = parse_count(value, field_name, 0)
            if seconds == 0:
                raise SpecError(
                    f"{field_name}: got 0, which would end every session at once; give the "
                    f"longest lifetime in seconds, or leave the key out for none"
                )
            limits[key] = float(seconds)
        else:
            limits[key] = float(parse_count(value, field_name, 0))
    return limits


def _standing(key: str, value: Any, field_name: str) -> float:
    """An owner's ``priority`` (0 to 100) or ``share`` (above 0, up to 1000)."""
    low, high = (0.0, 100.0) if key == "priority" else (0.0, 1000.0)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not low <= number <= high or (key == "share" and number == 0):
        kind = "from 0 to 100" if key == "priority" else "above 0, up to 1000"
        raise SpecError(f"{field_name}: got {value!r}; expected a number {kind}")
    return number


def standing(policies: Mapping[str, Mapping[str, float | None]], owner: str) -> tuple[float, float]:
    """``owner``'s (priority, share) by the parsed policies: the owner's, else the
    default's, else (0, 1)."""
    own = policies.get(owner, {}) if owner != "default" else {}
    default = policies.get("default", {})
    found = [own.get(key, default.get(key)) for key in STANDING_KEYS]
    return (float(found[0] or 0.0), float(1.0 if found[1] is None else found[1]))


def _cpu_limit(value: Any, field_name: str) -> float:
    if value == 0 and not isinstance(value, bool):
        return 0.0
    return parse_cpu(value, field_name)


def limits_for(policies: Mapping[str, Mapping[str, float | None]], owner: str) -> Limits:
    """The limits that apply to ``owner`` (parsed policies): the owner's keys, else the
    default's."""
    found: dict[str, Limit] = {}
    own = policies.get(owner, {}) if owner != "default" else {}
    for key in LIMIT_KEYS:
        if key in own:
            value, source = own[key], f"owners.{owner}"
        else:
            value, source = policies.get("default", {}).get(key), "default"
        if value is not None:
            found[key] = Limit(value, f"{FIELD}.{source}.{key}")
    return Limits(owner, **found)


def usage(sessions: Iterable[Reservation], owner: str) -> Usage:
    """What ``owner`` holds: the ledger's sessions of that owner (reserved or running; a
    queued one holds nothing), their containers' resources in all."""
    held = Usage()
    for entry in sorted(sessions, key=lambda e: str(e.name)):
        if entry.owner != owner or entry.state == "queued":
            continue
        total = Resources(0.0, 0, 0)
        for kernel in entry.kernels or ():
            total = total + Resources(
                float(kernel.cpu or 0), int(kernel.mem or 0), int(kernel.gpu or 0)
            )
        held = held.plus(str(entry.name), total)
    return held


def _amount(key: str, value: float) -> str:
    if key == "mem":
        return format_mem(int(value))
    if key == "cpu":
        return f"{format_cpu(value)} CPU"
    if key == "gpu":
        return f"{int(value)} GPU"
    return f"{int(value)} session(s)"


def refusal(
    limits: Limits,
    held: Usage,
    name: str,
    request: Resources,
    lifetime_s: float = 0,
    restarts: int = 0,
) -> str:
    """Why ``limits`` refuse session ``name`` (``request``: its containers' resources in
    all, ``lifetime_s``: its own lifetime, 0 for none; ``restarts``: the gang restarts it
    asks for) to an owner who holds ``held``; "" when they allow it. Names the policy, the
    owner's use and the limit."""
    owner = limits.owner
    why = forever(limits, lifetime_s, restarts)
    if why:
        return why

    after = held.plus(name, request)
    for key in ("sessions", "cpu", "mem", "gpu"):
        limit = getattr(limits, key)
        if limit is None or getattr(after, key) <= limit.value + (1e-6 if key == "cpu" else 0):
            continue
        now = getattr(held, key)
        running = f" ({', '.join(held.names)})" if held.names else ""
        return (
            f"owner {owner} holds {_amount(key, now)}{running}; session {name} would make "
            f"{_amount(key, getattr(after, key))}, more than the {_amount(key, limit.value)} "
            f"that {limit.source} allows"
        )
    return ""


def forever(limits: Limits, lifetime_s: float = 0, restarts: int = 0) -> str:
    """Why ``limits`` refuse a session whatever the owner holds (waiting cannot help): a
    lifetime longer than the owner's longest, or more restarts than it allows; "" else."""
    cap = limits.lifetime_s
    if cap is not None and lifetime_s > cap.value:
        return (
            f"owner {limits.owner}: session_lifetime_s {int(lifetime_s)} is longer than the "
            f"{int(cap.value)} s that {cap.source} allows"
        )
    most = limits.restarts
    if most is not None and restarts > most.value:
        return (
            f"owner {limits.owner}: session_restarts {restarts} is more than the "
            f"{int(most.value)} that {most.source} allows"
        )
    return ""


def lifetime(limits: Limits, requested_s: float) -> float:
    """The lifetime a session gets: its own (0: none), else the owner's longest."""
    if requested_s:
        return requested_s
    return limits.lifetime_s.value if limits.lifetime_s is not None else 0
