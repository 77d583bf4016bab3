"""Pure logic for Backend.AI-style cluster sessions: validation, naming, env, placement.

Why a separate file: Ansible modules ship this file to agent hosts (Debian Python 3.11),
and the unit tests exercise it without Docker or Ansible. It therefore imports only the
standard library and stays valid Python 3.9+.

Everything a user can get wrong raises ``SpecError`` (a ``ValueError``) whose message
names the field, shows what was given and says what is allowed. A session that is valid
but does not fit the agents right now raises ``Pending``; its text starts with
``PENDING:`` as the contract (section 3.3) requires.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
import json
import math
import posixpath
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

try:  # Ansible ships module_utils as ansible.module_utils.<name> ...
    from ansible.module_utils.bai_gpu import (
        LABEL_GPU_DEVICES,
        GpuAllocationError,
        allocate_devices,
        format_device_label,
        parse_device_label,
    )
except ImportError:  # ... the unit tests import the files directly (tests/unit/conftest.py)
    from bai_gpu import (  # type: ignore[no-redef]
        LABEL_GPU_DEVICES,
        GpuAllocationError,
        allocate_devices,
        format_device_label,
        parse_device_label,
    )

# --- Labels (CONTRACT 3.2) ------------------------------------------------------------
LABEL_SESSION = "ai.backend.cluster.session"
LABEL_SESSION_ID = "ai.backend.cluster.session-id"
LABEL_ROLE = "ai.backend.cluster.role"
LABEL_IDX = "ai.backend.cluster.idx"
LABEL_HOST = "ai.backend.cluster.host"
LABEL_KERNEL_ID = "ai.backend.cluster.kernel-id"
# Toolkit-specific: what idempotency and placement need to read back from Docker.
LABEL_SPEC_HASH = "ai.backend.cluster.spec-hash"
LABEL_MODE = "ai.backend.cluster.mode"
LABEL_CPU = "ai.backend.cluster.cpu"
LABEL_MEM = "ai.backend.cluster.mem"
LABEL_GPU = "ai.backend.cluster.gpu"
LABEL_RESOURCE_GROUP = "ai.backend.cluster.resource-group"
# Number of containers of the session (list and completeness checks read it back).
LABEL_SIZE = "ai.backend.cluster.size"

# --- Defaults and limits --------------------------------------------------------------
DEFAULT_IMAGE = "bai/session:latest"
DEFAULT_MASTER_PORT = 29500
SSH_PORT = 2200
DEFAULT_RESOURCE_GROUP = "default"
MODE_SINGLE = "single-node"
MODE_MULTI = "multi-node"
MODES = (MODE_SINGLE, MODE_MULTI)
MAX_SIZE = 64
# Docker refuses memory limits below 6 MiB; say so before Docker does.
MIN_MEM = 6 * 1024**2
# CPU shares are compared as floats; this absorbs rounding noise such as 0.1 + 0.2.
CPU_EPSILON = 1e-6
# The one BACKENDAI_* variable a user may set: it chooses the rendezvous port.
DIST_MASTER_PORT_VAR = "BACKENDAI_DIST_MASTER_PORT"
DIST_VARS = ("MASTER_ADDR", "MASTER_PORT", "TF_CONFIG")
# Set by the toolkit from the GPUs a container is given (upstream names); not user input.
GPU_ENV_VARS = ("GPU_COUNT", "N_GPUS")

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
_ROLE_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIGITS_RE = re.compile(r"^[0-9]+$")
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
_GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Docker's own grammar (go-units RAMInBytes): number, optional unit, optional i and b.
_MEM_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?) ?(?:([kmgtp])i?b?|b)?$", re.IGNORECASE)
_MEM_UNITS = {None: 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_MEM_UNITS["p"] = 1024**5

_TOP_KEYS = (
    "name",
    "size",
    "mode",
    "image",
    "resource_group",
    "env",
    "resources",
    "mounts",
    "roles",
)
_ROLE_KEYS = ("role", "replicas", "image", "resources")
_MOUNT_KEYS = ("src", "dst", "readonly")
_RESOURCE_KEYS = ("cpu", "mem", "gpu")


class SpecError(ValueError):
    """Invalid user input; the message says which field, what was given, what is allowed."""


class SessionConflict(ValueError):
    """The session name is taken by containers that do not match the request (another
    spec, leftovers of an earlier attempt); nothing may be changed."""


class Pending(Exception):
    """The session is valid but cannot be placed now (CONTRACT 3.3).

    ``permanent`` is True when waiting cannot help (the group has no agents, or the
    request exceeds the agents' *total* capacity), so callers can skip retry loops.
    """

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(f"PENDING: {reason}")
        self.reason = reason
        self.permanent = permanent


# --- Data -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Resources:
    """What one container is given (or what an agent has free): CPUs, bytes, GPUs."""

    cpu: float
    mem: int
    gpu: int

    def __add__(self, other: Resources) -> Resources:
        cpu = _round_cpu(self.cpu + other.cpu)
        return Resources(cpu, self.mem + other.mem, self.gpu + other.gpu)

    def __sub__(self, other: Resources) -> Resources:
        cpu = _round_cpu(self.cpu - other.cpu)
        return Resources(cpu, self.mem - other.mem, self.gpu - other.gpu)

    def fits_in(self, free: Resources) -> bool:
        """True if this request fits in ``free``; CPU compared with an epsilon."""
        return self.cpu <= free.cpu + CPU_EPSILON and self.mem <= free.mem and self.gpu <= free.gpu

    def describe(self) -> str:
        """Human form used in messages, e.g. ``cpu 1.5, mem 512m, gpu 0``."""
        return f"cpu {format_cpu(self.cpu)}, mem {format_mem(self.mem)}, gpu {self.gpu}"


ZERO = Resources(0.0, 0, 0)


@dataclass(frozen=True)
class Mount:
    """A host folder bind-mounted into every container of the session."""

    src: str
    dst: str
    readonly: bool


@dataclass(frozen=True)
class RoleSpec:
    """One role of a session: ``replicas`` containers named ``<role>1..<role>N``."""

    role: str
    replicas: int
    image: str
    resources: Resources


@dataclass(frozen=True)
class SessionSpec:
    """A validated session request. ``env`` is a key-sorted tuple of pairs so the spec
    is hashable and its hash does not depend on the order the user wrote env keys in."""

    name: str
    mode: str
    resource_group: str
    roles: tuple[RoleSpec, ...]
    env: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]

    @property
    def size(self) -> int:
        """Number of containers (kernels) in the session."""
        return sum(role.replicas for role in self.roles)

    @property
    def env_dict(self) -> dict[str, str]:
        """The user env as a plain dict (a fresh copy each time)."""
        return dict(self.env)


@dataclass(frozen=True)
class Kernel:
    """One container of a session; ``rank`` is its 0-based position in kernel order."""

    role: str
    idx: int
    hostname: str
    rank: int
    image: str
    resources: Resources


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

    @property
    def devices(self) -> tuple[int, ...]:
        """The GPU device indices this agent offers, sorted."""
        if self.gpu_devices is None:
            return tuple(range(int(self.gpu)))
        return tuple(sorted(set(int(i) for i in self.gpu_devices)))

    @property
    def free_devices(self) -> tuple[int, ...]:
        """Offered GPU devices that no session container holds."""
        held = set(int(i) for i in self.gpu_in_use)
        return tuple(i for i in self.devices if i not in held)

    @property
    def total(self) -> Resources:
        return Resources(float(self.cpu), int(self.mem), int(self.gpu))

    @property
    def free(self) -> Resources:
        """Capacity minus use; may be negative if an agent is overcommitted."""
        used = Resources(float(self.used_cpu), int(self.used_mem), int(self.used_gpu))
        left = self.total - used
        return Resources(left.cpu, left.mem, min(left.gpu, len(self.free_devices)))


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


# --- Formatting helpers ---------------------------------------------------------------
def _round_cpu(value: float) -> float:
    """Keep CPU sums free of float noise (0.1 + 0.2) so labels and messages stay tidy."""
    return round(value, 6)


def format_cpu(cpu: float) -> str:
    """``1.0 -> "1"``, ``1.5 -> "1.5"``: the form stored in LABEL_CPU and shown to people."""
    text = f"{cpu:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def format_mem(mem: int) -> str:
    """Bytes in Docker's 1024-based units, e.g. ``536870912 -> "512m"``."""
    sign = "-" if mem < 0 else ""
    size = abs(mem)
    for unit, factor in (("t", 1024**4), ("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if size >= factor:
            text = f"{size / factor:.2f}".rstrip("0").rstrip(".")
            return f"{sign}{text}{unit}"
    return f"{sign}{size}b"


def nano_cpus(resources: Resources) -> int:
    """Docker's ``NanoCpus`` value for ``resources.cpu``."""
    return round(resources.cpu * 1e9)


# --- Scalars --------------------------------------------------------------------------
def _kind(value: Any) -> str:
    return type(value).__name__


def parse_mem(value: Any, field_name: str = "mem") -> int:
    """Parse a memory size into bytes, with Docker's semantics (all units 1024-based).

    Accepts an int (bytes) or a string: ``"100"`` (bytes), ``"2048k"``, ``"512m"``,
    ``"1g"``, ``"1.5G"``, ``"512Mi"``, ``"1GiB"``, ``"1gb"``. Booleans are rejected
    because YAML turns ``yes`` into ``True``, which is never meant as one byte.
    """
    allowed = "an integer number of bytes or a string like '512m', '1g', '1.5G', '1Gi'"
    if isinstance(value, bool):
        raise SpecError(f"{field_name}: got boolean {value!r}; expected {allowed}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        nbytes = value
    elif isinstance(value, str):
        nbytes = _parse_mem_string(value.strip(), field_name, allowed)
    else:
        raise SpecError(f"{field_name}: got {_kind(value)} {value!r}; expected {allowed}")
    if nbytes <= 0:
        raise SpecError(f"{field_name}: got {value!r}; memory must be more than 0 bytes")
    return nbytes


def _parse_mem_string(text: str, field_name: str, allowed: str) -> int:
    match = _MEM_RE.match(text)
    if match is None:
        raise SpecError(f"{field_name}: cannot read {text!r} as a size; expected {allowed}")
    number, unit = match.group(1), match.group(2)
    factor = _MEM_UNITS[unit.lower() if unit else None]
    try:
        return int(Decimal(number) * factor)
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise SpecError(f"{field_name}: cannot read {text!r}; expected {allowed}") from None


def _parse_cpu(value: Any, field_name: str) -> float:
    """CPUs as a positive number, kept to 3 decimals (Docker's ``--cpus`` precision)."""
    allowed = "a number of CPUs greater than 0, e.g. 1, 0.5 or 2.25"
    if isinstance(value, bool):
        raise SpecError(f"{field_name}: got boolean {value!r}; expected {allowed}")
    number: float
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise SpecError(f"{field_name}: got {value!r}; expected {allowed}") from None
    else:
        raise SpecError(f"{field_name}: got {_kind(value)} {value!r}; expected {allowed}")
    if not math.isfinite(number) or round(number, 3) <= 0:
        raise SpecError(f"{field_name}: got {value!r}; expected {allowed}")
    return round(number, 3)


def _parse_count(value: Any, field_name: str, minimum: int) -> int:
    """A whole number >= ``minimum``; digit strings are accepted because ``-e k=v``
    on the ansible-playbook command line always yields strings."""
    allowed = f"a whole number >= {minimum}"
    if isinstance(value, bool):
        raise SpecError(f"{field_name}: got boolean {value!r}; expected {allowed}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and _DIGITS_RE.match(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int):
        raise SpecError(f"{field_name}: got {_kind(value)} {value!r}; expected {allowed}")
    if value < minimum:
        raise SpecError(f"{field_name}: got {value}; expected {allowed}")
    return value


def parse_port(value: Any, field_name: str) -> int:
    """A TCP port 1..65535 given as int or digit string (env values are strings)."""
    allowed = "a TCP port number from 1 to 65535"
    if isinstance(value, bool):
        raise SpecError(f"{field_name}: got boolean {value!r}; expected {allowed}")
    if isinstance(value, str) and _DIGITS_RE.match(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int) or not 1 <= value <= 65535:
        raise SpecError(f"{field_name}: got {value!r}; expected {allowed}")
    return value


def _reject_unknown(raw: Mapping[str, Any], known: Sequence[str], where: str) -> None:
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        raise SpecError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(known)}"
        )


def _require_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}: expected a mapping (dict), got {_kind(value)} {value!r}")
    return value


def _require_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{where}: expected a list, got {_kind(value)} {value!r}")
    return list(value)


# --- Resources ------------------------------------------------------------------------
def parse_resources(
    raw: Mapping[str, Any] | None,
    default: Resources | None = None,
    field_name: str = "resources",
) -> Resources:
    """Resources of one container. Keys missing from ``raw`` come from ``default``
    (cpu 1, mem 1g, gpu 0 when no default is given), so a role can override only what
    differs from the session level."""
    base = default or Resources(1.0, 1024**3, 0)
    if raw is None:
        return base
    raw = _require_mapping(raw, field_name)
    _reject_unknown(raw, _RESOURCE_KEYS, field_name)
    given = {key: value for key, value in raw.items() if value is not None}
    cpu = _parse_cpu(given["cpu"], f"{field_name}.cpu") if "cpu" in given else base.cpu
    mem = parse_mem(given["mem"], f"{field_name}.mem") if "mem" in given else base.mem
    if mem < MIN_MEM:
        raise SpecError(
            f"{field_name}.mem: got {format_mem(mem)} ({mem} bytes); Docker needs at "
            f"least 6m per container"
        )
    gpu = base.gpu
    if "gpu" in given:
        gpu = _parse_count(given["gpu"], f"{field_name}.gpu", minimum=0)
    return Resources(cpu, mem, gpu)


# --- Session spec ---------------------------------------------------------------------
def normalize_spec(raw: Mapping[str, Any]) -> SessionSpec:
    """Validate the playbook's session variables and return a ``SessionSpec``.

    Keys: name (required), size, mode, image, resource_group, env, resources, mounts,
    roles. A key whose value is None counts as absent, so playbooks can pass optional
    variables through unconditionally. ``size`` is required unless ``roles`` is given;
    if both are given they must agree.
    """
    raw = _require_mapping(raw, "session")
    _reject_unknown(raw, _TOP_KEYS, "session")
    given = {key: value for key, value in raw.items() if value is not None}
    name = _parse_name(given.get("name"))
    mode = _parse_mode(given.get("mode", MODE_SINGLE))
    group = _parse_group(given.get("resource_group", DEFAULT_RESOURCE_GROUP))
    env = _parse_env(given.get("env", {}))
    mounts = _parse_mounts(given.get("mounts", []))
    image = _parse_image(given.get("image", DEFAULT_IMAGE), "image")
    resources = parse_resources(given.get("resources"))
    size = _parse_size(given["size"], "size") if "size" in given else None
    if "roles" in given:
        roles = _parse_roles(given["roles"], image, resources)
        _check_size_matches(size, roles)
    elif size is None:
        raise SpecError("size: required (a whole number 1..64) unless roles is given")
    else:
        roles = _default_roles(size, image, resources)
    spec = SessionSpec(name, mode, group, roles, env, mounts)
    _check_total_size(spec)
    _check_unique_hostnames(spec)
    _check_env_port(spec)
    return spec


def _parse_name(value: Any) -> str:
    rule = (
        "1-32 characters of lowercase letters, digits and '-', starting and ending "
        "with a letter or digit (it becomes part of container and network names)"
    )
    if value is None:
        raise SpecError(f"name: required; {rule}")
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise SpecError(f"name: got {value!r}; a session name is {rule}")
    return value


def _parse_mode(value: Any) -> str:
    if value not in MODES:
        raise SpecError(f"mode: got {value!r}; allowed: {', '.join(MODES)}")
    return str(value)


def _parse_image(value: Any, field_name: str) -> str:
    if not isinstance(value, str) or not _IMAGE_RE.match(value):
        raise SpecError(
            f"{field_name}: got {value!r}; expected a Docker image reference such as "
            f"{DEFAULT_IMAGE!r} (no spaces)"
        )
    return value


def _parse_group(value: Any) -> str:
    if not isinstance(value, str) or not _GROUP_RE.match(value):
        raise SpecError(
            f"resource_group: got {value!r}; expected 1-64 characters of letters, "
            f"digits, '_', '.', '-', starting with a letter or digit"
        )
    return value


def _parse_size(value: Any, field_name: str) -> int:
    size = _parse_count(value, field_name, minimum=1)
    if size > MAX_SIZE:
        raise SpecError(f"{field_name}: got {size}; at most {MAX_SIZE} containers")
    return size


def _default_roles(size: int, image: str, resources: Resources) -> tuple[RoleSpec, ...]:
    """Homogeneous session: ``main`` x1 plus ``sub`` x(size-1) (none when size is 1)."""
    roles = [RoleSpec("main", 1, image, resources)]
    if size > 1:
        roles.append(RoleSpec("sub", size - 1, image, resources))
    return tuple(roles)


def _parse_roles(value: Any, image: str, resources: Resources) -> tuple[RoleSpec, ...]:
    items = _require_list(value, "roles")
    if not items:
        raise SpecError("roles: empty; list at least one role, the first is the master")
    roles = tuple(
        _parse_role(item, f"roles[{i}]", image, resources) for i, item in enumerate(items)
    )
    names = [role.role for role in roles]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SpecError(f"roles: role name(s) used more than once: {', '.join(duplicates)}")
    return roles


def _parse_role(item: Any, where: str, image: str, resources: Resources) -> RoleSpec:
    item = _require_mapping(item, where)
    _reject_unknown(item, _ROLE_KEYS, where)
    name = item.get("role")
    if not isinstance(name, str) or not _ROLE_RE.match(name):
        raise SpecError(
            f"{where}.role: got {name!r}; a role name is 1-16 lowercase letters and "
            f"digits starting with a letter (hostnames are <role><idx>)"
        )
    if item.get("replicas") is None:
        raise SpecError(f"{where}.replicas: required (a whole number >= 1)")
    replicas = _parse_size(item["replicas"], f"{where}.replicas")
    role_image = image
    if item.get("image") is not None:
        role_image = _parse_image(item["image"], f"{where}.image")
    role_resources = parse_resources(item.get("resources"), resources, f"{where}.resources")
    return RoleSpec(name, replicas, role_image, role_resources)


def _check_size_matches(size: int | None, roles: tuple[RoleSpec, ...]) -> None:
    total = sum(role.replicas for role in roles)
    if size is not None and size != total:
        counts = ", ".join(f"{role.role}:{role.replicas}" for role in roles)
        raise SpecError(
            f"size: got {size} but roles add up to {total} containers ({counts}); "
            f"drop size or make it equal the sum of replicas"
        )


def _check_total_size(spec: SessionSpec) -> None:
    if spec.size > MAX_SIZE:
        raise SpecError(f"roles: {spec.size} containers in total; at most {MAX_SIZE} per session")


def _check_unique_hostnames(spec: SessionSpec) -> None:
    """Role names may end in digits, so 'sub' x11 and 'sub1' x1 both make 'sub11'."""
    seen: dict[str, str] = {}
    for role in spec.roles:
        for idx in range(1, role.replicas + 1):
            host = f"{role.role}{idx}"
            if host in seen:
                raise SpecError(
                    f"roles: hostname {host!r} would be made by both role "
                    f"{seen[host]!r} and role {role.role!r}; rename one of them"
                )
            seen[host] = role.role


def _check_env_port(spec: SessionSpec) -> None:
    """Fail early if the user's rendezvous port leaves no room for TF_CONFIG's ports."""
    env = spec.env_dict
    if DIST_MASTER_PORT_VAR in env:
        master_port(env, {}, spec.size)


def _parse_env(value: Any) -> tuple[tuple[str, str], ...]:
    env = _require_mapping(value, "env")
    pairs = []
    for key, val in env.items():
        _check_env_key(key)
        pairs.append((key, _check_env_value(key, val)))
    return tuple(sorted(pairs))


def _check_env_key(key: Any) -> None:
    if not isinstance(key, str) or not _ENV_KEY_RE.match(key):
        raise SpecError(
            f"env: key {key!r} is not a valid variable name; use letters, digits and "
            f"'_', not starting with a digit"
        )
    if key.startswith("BACKENDAI_") and key != DIST_MASTER_PORT_VAR:
        raise SpecError(
            f"env.{key}: BACKENDAI_* variables are set by the toolkit to describe the "
            f"session and cannot be given (only {DIST_MASTER_PORT_VAR} is allowed)"
        )
    if key in GPU_ENV_VARS:
        raise SpecError(
            f"env.{key}: set by the toolkit to the number of GPUs each container is "
            f"given; ask for GPUs with resources.gpu instead"
        )


def _check_env_value(key: str, value: Any) -> str:
    if isinstance(value, (bool, int, float)):
        raise SpecError(
            f"env.{key}: got {_kind(value)} {value!r}; environment values are strings, "
            f'quote it (e.g. "{json.dumps(value)}")'
        )
    if not isinstance(value, str):
        raise SpecError(f"env.{key}: got {_kind(value)} {value!r}; expected a string")
    if "\0" in value or "\n" in value or "\r" in value:
        raise SpecError(f"env.{key}: value contains a NUL or newline, which is not allowed")
    return value


def _parse_mounts(value: Any) -> tuple[Mount, ...]:
    items = _require_list(value, "mounts")
    mounts = tuple(_parse_mount(item, f"mounts[{i}]") for i, item in enumerate(items))
    dsts = [mount.dst for mount in mounts]
    duplicates = sorted({dst for dst in dsts if dsts.count(dst) > 1})
    if duplicates:
        raise SpecError(f"mounts: dst used more than once: {', '.join(duplicates)}")
    return mounts


def _parse_mount(item: Any, where: str) -> Mount:
    item = _require_mapping(item, where)
    _reject_unknown(item, _MOUNT_KEYS, where)
    readonly = item.get("readonly", False)
    if not isinstance(readonly, bool):
        raise SpecError(f"{where}.readonly: got {readonly!r}; expected true or false")
    src = _parse_path(item.get("src"), f"{where}.src")
    dst = _parse_path(item.get("dst"), f"{where}.dst")
    if dst == "/":
        raise SpecError(f"{where}.dst: cannot mount over the container's root '/'")
    return Mount(src, dst, readonly)


def _parse_path(value: Any, where: str) -> str:
    """An absolute path without '..', ':' or ',' (the separators of Docker's mount
    syntax), normalised so '/data/' and '/data' compare equal."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise SpecError(f"{where}: got {value!r}; expected an absolute path like /data")
    if ".." in value.split("/"):
        raise SpecError(f"{where}: got {value!r}; '..' is not allowed in mount paths")
    if any(ch in value for ch in ":,\0\n\r"):
        raise SpecError(f"{where}: got {value!r}; ':', ',' and newlines are not allowed")
    return "/" + posixpath.normpath(value).lstrip("/")


# --- Kernels, hashing, names ----------------------------------------------------------
def expand_kernels(spec: SessionSpec) -> list[Kernel]:
    """Kernel order (CONTRACT 3.7): roles in order, each role's containers by idx."""
    kernels: list[Kernel] = []
    for role in spec.roles:
        for idx in range(1, role.replicas + 1):
            kernels.append(
                Kernel(
                    role=role.role,
                    idx=idx,
                    hostname=f"{role.role}{idx}",
                    rank=len(kernels),
                    image=role.image,
                    resources=role.resources,
                )
            )
    return kernels


def spec_canonical(spec: SessionSpec) -> dict[str, Any]:
    """JSON-ready form of the *requested* spec (not the placement): env sorted by key,
    roles and mounts in the user's order (their order changes the session)."""
    return {
        "name": spec.name,
        "mode": spec.mode,
        "resource_group": spec.resource_group,
        "roles": [
            {
                "role": role.role,
                "replicas": role.replicas,
                "image": role.image,
                "resources": _resources_canonical(role.resources),
            }
            for role in spec.roles
        ],
        "env": dict(sorted(spec.env)),
        "mounts": [{"src": m.src, "dst": m.dst, "readonly": m.readonly} for m in spec.mounts],
    }


def _resources_canonical(resources: Resources) -> dict[str, Any]:
    return {
        "cpu": format_cpu(resources.cpu),
        "mem": resources.mem,
        "gpu": resources.gpu,
    }


def spec_hash(spec: SessionSpec) -> str:
    """First 16 hex chars of sha256 over the canonical JSON; stored in LABEL_SPEC_HASH
    so a re-run can tell "same session" from "same name, different spec"."""
    text = json.dumps(spec_canonical(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def container_name(session: str, hostname: str) -> str:
    return f"bai-{session}-{hostname}"


def network_name(session: str) -> str:
    return f"bai-{session}-net"


def kernel_id() -> str:
    """A fresh kernel UUID; main1's kernel id doubles as the session id."""
    return str(uuid.uuid4())


def session_labels(spec: SessionSpec, *, session_id: str) -> dict[str, str]:
    """Labels for every object of a session (networks, secrets, containers)."""
    return {
        LABEL_SESSION: spec.name,
        LABEL_SESSION_ID: session_id,
        LABEL_SPEC_HASH: spec_hash(spec),
        LABEL_RESOURCE_GROUP: spec.resource_group,
    }


def container_labels(
    spec: SessionSpec,
    kernel: Kernel,
    *,
    session_id: str,
    kernel_id: str,
    mode: str,
    gpu_devices: Sequence[int] = (),
) -> dict[str, str]:
    """Labels for one container; LABEL_CPU/MEM/GPU are what ``used_from_labels`` reads
    back, so placement needs no state file. ``mode`` is the mode as placed;
    ``gpu_devices`` the agent's GPU device indices the container is given
    (LABEL_GPU_DEVICES, "" for none: placement reads which devices are taken)."""
    labels = session_labels(spec, session_id=session_id)
    labels.update(
        {
            LABEL_ROLE: kernel.role,
            LABEL_IDX: str(kernel.idx),
            LABEL_HOST: kernel.hostname,
            LABEL_KERNEL_ID: kernel_id,
            LABEL_MODE: mode,
            LABEL_SIZE: str(spec.size),
            LABEL_CPU: format_cpu(kernel.resources.cpu),
            LABEL_MEM: str(kernel.resources.mem),
            LABEL_GPU: str(kernel.resources.gpu),
            LABEL_GPU_DEVICES: format_device_label(gpu_devices),
        }
    )
    return labels


# --- Environment (CONTRACT 3.7) -------------------------------------------------------
def parse_image_env(entries: Iterable[str] | None) -> dict[str, str]:
    """Docker's ``Config.Env`` list (``["K=V", ...]``) as a dict; later entries win."""
    env: dict[str, str] = {}
    for entry in entries or ():
        key, _, value = entry.partition("=")
        env[key] = value
    return env


def master_port(
    user_env: Mapping[str, str],
    image_env: Mapping[str, str],
    size: int,
) -> int:
    """The rendezvous port: BACKENDAI_DIST_MASTER_PORT (user env over image env) or
    29500. TF_CONFIG gives worker i port P+i, so P+size-1 must still be a port."""
    raw: Any = DEFAULT_MASTER_PORT
    field_name = "MASTER_PORT"
    if DIST_MASTER_PORT_VAR in user_env:
        raw = user_env[DIST_MASTER_PORT_VAR]
        field_name = f"env.{DIST_MASTER_PORT_VAR}"
    elif DIST_MASTER_PORT_VAR in image_env:
        raw = image_env[DIST_MASTER_PORT_VAR]
        field_name = f"{DIST_MASTER_PORT_VAR} (set in the image's ENV)"
    port = parse_port(raw, field_name)
    if port + size - 1 > 65535:
        raise SpecError(
            f"{field_name}: got {raw!r}; with {size} containers TF_CONFIG needs ports "
            f"{port}..{port + size - 1}, so it must be at most {65536 - size}"
        )
    return port


def cluster_env(
    kernels: Sequence[Kernel],
    kernel: Kernel,
    *,
    session_name: str,
    session_id: str,
    kernel_id: str,
    mode: str,
    user_env: Mapping[str, str],
    image_env: Mapping[str, str],
) -> dict[str, str]:
    """Environment for ``kernel``'s container: ``{**user_env, **toolkit_values}``.

    The caller's final container env is ``{**image_env, **returned}``.

    * BACKENDAI_CLUSTER_* / BACKENDAI_KERNEL_ID / BACKENDAI_SESSION_* always come from
      the toolkit (they override any user or image value).
    * Only when N > 1: MASTER_ADDR (first host), MASTER_PORT (see ``master_port``) and
      TF_CONFIG (worker i at P+i, task index = LOCAL_RANK). Each one is left out of the
      toolkit values if the user or image env already defines it, even as "" - a value
      from user_env then stays in the result, one from image_env reaches the container
      through the caller's merge. TF_CONFIG's P is the effective MASTER_PORT when that
      was preset to a valid port, so the two never disagree.
    * WORLD_SIZE, RANK and LOCAL_RANK are never set (torchrun sets them per process).
    """
    if mode not in MODES:
        raise SpecError(f"mode: got {mode!r}; allowed: {', '.join(MODES)}")
    hosts = [k.hostname for k in kernels]
    if kernel.hostname not in hosts:
        raise ValueError(f"kernel {kernel.hostname!r} is not one of {hosts}")
    env = dict(user_env)
    env.update(
        {
            "BACKENDAI_CLUSTER_SIZE": str(len(hosts)),
            "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
            "BACKENDAI_CLUSTER_REPLICAS": replicas_string(kernels),
            "BACKENDAI_CLUSTER_HOST": kernel.hostname,
            "BACKENDAI_CLUSTER_IDX": str(kernel.idx),
            "BACKENDAI_CLUSTER_ROLE": kernel.role,
            "BACKENDAI_CLUSTER_LOCAL_RANK": str(hosts.index(kernel.hostname)),
            "BACKENDAI_CLUSTER_MODE": mode,
            "BACKENDAI_KERNEL_ID": kernel_id,
            "BACKENDAI_SESSION_ID": session_id,
            "BACKENDAI_SESSION_NAME": session_name,
        }
    )
    if len(hosts) > 1:
        env.update(_dist_env(hosts, kernel.hostname, user_env, image_env))
    return env


def replicas_string(kernels: Sequence[Kernel]) -> str:
    """``role:count`` in kernel order, e.g. ``main:1,sub:3``."""
    counts: dict[str, int] = {}
    for kernel in kernels:
        counts[kernel.role] = counts.get(kernel.role, 0) + 1
    return ",".join(f"{role}:{count}" for role, count in counts.items())


def _dist_env(
    hosts: list[str],
    hostname: str,
    user_env: Mapping[str, str],
    image_env: Mapping[str, str],
) -> dict[str, str]:
    """MASTER_ADDR, MASTER_PORT, TF_CONFIG minus those the user or image preset."""
    preset = {**image_env, **user_env}
    port = master_port(user_env, image_env, len(hosts))
    if "MASTER_PORT" in preset:
        port = _valid_port_or(preset["MASTER_PORT"], port, len(hosts))
    tf_config = {
        "cluster": {"worker": [f"{host}:{port + i}" for i, host in enumerate(hosts)]},
        "task": {"type": "worker", "index": hosts.index(hostname)},
    }
    values = {
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": str(port),
        "TF_CONFIG": json.dumps(tf_config),
    }
    return {key: value for key, value in values.items() if key not in preset}


def _valid_port_or(value: str, fallback: int, size: int) -> int:
    """A preset MASTER_PORT is kept as is; use it for TF_CONFIG only if it is usable."""
    try:
        port = parse_port(value, "MASTER_PORT")
    except SpecError:
        return fallback
    return port if port + size - 1 <= 65535 else fallback


# --- Placement (CONTRACT 3.3) ---------------------------------------------------------
def used_from_labels(containers_labels: Iterable[Mapping[str, str]]) -> Resources:
    """Sum what running session containers were given, from their labels.

    Pass the labels of *running* containers only. Containers without LABEL_CPU,
    LABEL_MEM and LABEL_GPU (not made by this toolkit) are skipped; a label that does
    not parse counts as 0 for that resource rather than breaking every placement.
    """
    total = ZERO
    for labels in containers_labels:
        if not all(key in labels for key in (LABEL_CPU, LABEL_MEM, LABEL_GPU)):
            continue
        total = total + Resources(
            _label_float(labels[LABEL_CPU]),
            int(_label_float(labels[LABEL_MEM])),
            int(_label_float(labels[LABEL_GPU])),
        )
    return total


def _label_float(text: str) -> float:
    """A non-negative finite number from a label, else 0."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


def place(
    kernels: Sequence[Kernel],
    agents: Sequence[Agent],
    *,
    mode: str,
    resource_group: str,
) -> Placement:
    """Choose an agent for every kernel, or raise ``Pending`` (nothing is half-placed).

    single-node: every kernel on the one agent that fits their sum and keeps the most
    free capacity (free CPU, then free memory, then name). multi-node: the same if one
    agent fits all (the result then says single-node); else kernels are spread, in
    kernel order, each to the agent with the most capacity left that fits it.
    """
    if mode not in MODES:
        raise SpecError(f"mode: got {mode!r}; allowed: {', '.join(MODES)}")
    if not kernels:
        raise ValueError("place() needs at least one kernel")
    group = _group_agents(agents, resource_group)
    _check_never_fits(kernels, group, resource_group)
    whole = _place_on_one(kernels, group)
    if whole is not None:
        return whole
    if mode == MODE_SINGLE:
        raise _single_node_pending(kernels, group, resource_group)
    assignment = _spread(kernels, group)
    if assignment is None:
        raise _multi_node_pending(kernels, group, resource_group)
    used = set(assignment.values())
    return Placement(MODE_MULTI if len(used) > 1 else MODE_SINGLE, assignment)


def _group_agents(agents: Sequence[Agent], resource_group: str) -> list[Agent]:
    names = [agent.name for agent in agents]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"agent name(s) listed more than once: {', '.join(duplicates)}")
    group = sorted((a for a in agents if a.group == resource_group), key=_by_name)
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
            sizes = "; ".join(f"{a.name}: {a.total.describe()}" for a in group)
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
    for agent in group:
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
        f"; GPUs asked for: {need_gpu}; {'; '.join(parts)} (GPUs are the devices "
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
        if not any(count for _, count in share):
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
    left = {agent.name: agent.free for agent in group}
    result: dict[str, str] = {}
    for kernel in kernels:
        need = kernel.resources
        fitting = [name for name in left if need.fits_in(left[name])]
        if not fitting:
            return None
        name = min(fitting, key=lambda n: _room_key(n, left[n]))
        left[name] = left[name] - need
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
    for agent in group:
        short = _short_of(need, agent.free)
        note = f" (short of {', '.join(short)})" if short else ""
        parts.append(f"{agent.name}: {agent.free.describe()} free{note}")
    return "; ".join(parts)


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
    kernels: Sequence[Kernel], group: list[Agent], resource_group: str
) -> Pending:
    need = _total(kernels)
    never = not any(need.fits_in(agent.total) for agent in group)
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
    kernels: Sequence[Kernel], group: list[Agent], resource_group: str
) -> Pending:
    need = _total(kernels)
    never = not need.fits_in(_capacity(group))
    hint = "; it can never fit in this group" if never else ""
    per_kernel = kernels[0].resources if len({k.resources for k in kernels}) == 1 else None
    each = f" ({per_kernel.describe()} each)" if per_kernel else ""
    free = "; ".join(f"{a.name}: {a.free.describe()} free" for a in group)
    return Pending(
        f"the {len(kernels)} containers{each} do not fit across the agents of resource "
        f"group {resource_group!r} (they need {need.describe()} together; {free})"
        f"{hint}{_gpu_note(need.gpu, group)}",
        permanent=never,
    )


# --- Agent capacity -------------------------------------------------------------------
def agent_capacity(override: Mapping[str, Any] | None, *, ncpu: int, mem_total: int) -> Resources:
    """What an agent offers to sessions: the inventory's ``bai_agent_resources`` where
    given (any of cpu, mem, gpu), else what the engine reports (GPUs: 0)."""
    reported = Resources(float(ncpu), int(mem_total), 0)
    if not override:
        return reported
    raw = _require_mapping(override, "bai_agent_resources")
    _reject_unknown(raw, _RESOURCE_KEYS, "bai_agent_resources")
    given = {key: value for key, value in raw.items() if value is not None}
    cpu = reported.cpu
    if "cpu" in given:
        cpu = _parse_cpu(given["cpu"], "bai_agent_resources.cpu")
    mem = reported.mem
    if "mem" in given:
        mem = parse_mem(given["mem"], "bai_agent_resources.mem")
    gpu = 0
    if "gpu" in given:
        gpu = _parse_count(given["gpu"], "bai_agent_resources.gpu", minimum=0)
    return Resources(cpu, mem, gpu)


# --- Planning a session ---------------------------------------------------------------
def network_plan(
    spec: SessionSpec, agents_used: Sequence[str], *, session_id: str
) -> dict[str, Any] | None:
    """The session network (CONTRACT 3.4): none for size 1, a bridge when every
    container is on one agent, an attachable overlay when they are spread."""
    if spec.size == 1:
        return None
    return {
        "name": network_name(spec.name),
        "driver": "bridge" if len(agents_used) <= 1 else "overlay",
        "labels": session_labels(spec, session_id=session_id),
    }


def plan_session(
    spec: SessionSpec,
    agents: Sequence[Agent],
    existing: Sequence[Mapping[str, Any]] = (),
    *,
    inventory: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Decide what creating ``spec`` means now. Pure: the caller supplies the agents
    (capacity and use), the containers of this session name found on them
    (``existing``: dicts with agent, name, state, image and labels) and, optionally,
    per agent which images and mount sources it has (``inventory``: agent ->
    {"images": {ref: bool}, "paths": {path: bool}}).

    Returns a dict with ``action`` "create" (fresh ids and a placement) or "exists"
    (the session is already there with this very spec: ids and placement are read
    back from the labels), ``ready`` (exists and every container runs), session_id,
    mode (as placed), network, agents (in order of first use, the master's first),
    kernels, ``ssh_port`` (an existing master's published sshd) and a summary.

    Raises ``SessionConflict`` if the name is taken by containers of another spec or
    an incomplete session, ``Pending`` if it does not fit now, ``SpecError`` if an
    image or mount source is missing on a chosen agent.
    """
    kernels = expand_kernels(spec)
    if existing:
        kernel_ids, assignment, mode = _read_existing(spec, kernels, existing)
        gpu_devices = _existing_gpu_devices(existing)
        action = "exists"
    else:
        placement = place(kernels, agents, mode=spec.mode, resource_group=spec.resource_group)
        assignment, mode = placement.assignment, placement.mode
        gpu_devices = assign_gpu_devices(kernels, assignment, agents)
        kernel_ids = {k.hostname: kernel_id() for k in kernels}
        _check_inventory(spec, kernels, assignment, inventory or {})
        action = "create"
    session_id = kernel_ids[kernels[0].hostname]
    used = list(dict.fromkeys(assignment[k.hostname] for k in kernels))
    planned = []
    for kernel in kernels:
        kid = kernel_ids[kernel.hostname]
        planned.append(
            {
                "hostname": kernel.hostname,
                "role": kernel.role,
                "idx": kernel.idx,
                "rank": kernel.rank,
                "agent": assignment[kernel.hostname],
                "kernel_id": kid,
                "container_name": container_name(spec.name, kernel.hostname),
                "image": kernel.image,
                "resources": {
                    "cpu": kernel.resources.cpu,
                    "mem": kernel.resources.mem,
                    "gpu": kernel.resources.gpu,
                },
                # The agent's GPU device indices this container is given ([] for none).
                "gpu_devices": list(gpu_devices.get(kernel.hostname, [])),
                "labels": container_labels(
                    spec,
                    kernel,
                    session_id=session_id,
                    kernel_id=kid,
                    mode=mode,
                    gpu_devices=gpu_devices.get(kernel.hostname, []),
                ),
            }
        )
    network = network_plan(spec, used, session_id=session_id)
    return {
        "action": action,
        # Nothing to do: the session exists and every container runs.
        "ready": action == "exists" and all(c.get("state") == "running" for c in existing),
        "ssh_port": _published_ssh_port(existing, session_id),
        "session_id": session_id,
        "mode": mode,
        "requested_mode": spec.mode,
        "spec_hash": spec_hash(spec),
        "network": network,
        "agents": used,
        "kernels": planned,
        "summary": {
            "name": spec.name,
            "session_id": session_id,
            "mode": mode,
            "network": network["name"] if network else None,
            "network_driver": network["driver"] if network else None,
            "containers": [
                {
                    "host": k["hostname"],
                    "role": k["role"],
                    "idx": k["idx"],
                    "agent": k["agent"],
                    "kernel_id": k["kernel_id"],
                    "container": k["container_name"],
                }
                for k in planned
            ],
        },
    }


def _published_ssh_port(existing: Sequence[Mapping[str, Any]], session_id: str) -> int | None:
    """The host port of the master's sshd, read from an existing master container."""
    for container in existing:
        if (container.get("labels") or {}).get(LABEL_KERNEL_ID) != session_id:
            continue
        for port in container.get("ports") or []:
            if port.get("container_port") == SSH_PORT and port.get("host_port"):
                return int(port["host_port"])
    return None


def _existing_gpu_devices(existing: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """hostname -> GPU device indices, read back from the containers' labels."""
    return {
        str((c.get("labels") or {}).get(LABEL_HOST)): parse_device_label(
            (c.get("labels") or {}).get(LABEL_GPU_DEVICES)
        )
        for c in existing
    }


def _destroy_hint(name: str) -> str:
    return (
        f"destroy it first (ansible-playbook playbooks/session_destroy.yml "
        f"-e session_name={name}) or choose another name"
    )


def _read_existing(
    spec: SessionSpec,
    kernels: Sequence[Kernel],
    existing: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, str], dict[str, str], str]:
    """Kernel ids, placement and mode of a session already on the agents, or raise
    ``SessionConflict`` when it is not exactly this spec and complete."""
    want = spec_hash(spec)
    hashes = {str(c.get("labels", {}).get(LABEL_SPEC_HASH)) for c in existing}
    if hashes != {want}:
        raise SessionConflict(
            f"session {spec.name!r} already exists with a different spec; nothing was "
            f"changed. Existing: {describe_existing(existing)}. Requested: "
            f"{describe_spec(spec)}. To replace it, {_destroy_hint(spec.name)}"
        )
    ids = {str(c.get("labels", {}).get(LABEL_SESSION_ID)) for c in existing}
    by_host: dict[str, Mapping[str, Any]] = {}
    for container in existing:
        host = str(container.get("labels", {}).get(LABEL_HOST))
        if host in by_host or len(ids) > 1:
            raise SessionConflict(
                f"session {spec.name!r} has containers of more than one attempt "
                f"(session ids {', '.join(sorted(ids))}); nothing was changed; "
                f"{_destroy_hint(spec.name)}"
            )
        by_host[host] = container
    missing = [k.hostname for k in kernels if k.hostname not in by_host]
    if missing:
        found = ", ".join(f"{h} on {c.get('agent')}" for h, c in sorted(by_host.items()))
        raise SessionConflict(
            f"session {spec.name!r} exists but is incomplete (missing: "
            f"{', '.join(missing)}; found: {found}); nothing was changed; "
            f"{_destroy_hint(spec.name)}"
        )
    kernel_ids = {
        k.hostname: str(by_host[k.hostname]["labels"].get(LABEL_KERNEL_ID)) for k in kernels
    }
    assignment = {k.hostname: str(by_host[k.hostname].get("agent")) for k in kernels}
    master = by_host[kernels[0].hostname]["labels"]
    mode = str(master.get(LABEL_MODE, spec.mode))
    if kernel_ids[kernels[0].hostname] != master.get(LABEL_SESSION_ID):
        raise SessionConflict(
            f"session {spec.name!r}: {kernels[0].hostname}'s kernel id is not the "
            f"session id; the labels were changed by hand; {_destroy_hint(spec.name)}"
        )
    return kernel_ids, assignment, mode


def describe_spec(spec: SessionSpec) -> str:
    """One line: size, roles, per-role resources and images, mode, resource group."""
    roles = "; ".join(
        f"{r.role} x{r.replicas} ({r.resources.describe()}, image {r.image})" for r in spec.roles
    )
    return (
        f"{spec.size} container(s): {roles}; mode {spec.mode}; resource group "
        f"{spec.resource_group}; {len(spec.env)} env var(s); {len(spec.mounts)} mount(s)"
    )


def describe_existing(existing: Sequence[Mapping[str, Any]]) -> str:
    """The same kind of line, read back from the containers' labels."""
    roles: dict[str, list[Mapping[str, Any]]] = {}
    ordered = sorted(
        existing,
        key=lambda c: (
            str(c.get("labels", {}).get(LABEL_ROLE)),
            _label_float(str(c.get("labels", {}).get(LABEL_IDX))),
        ),
    )
    for container in ordered:
        roles.setdefault(str(container.get("labels", {}).get(LABEL_ROLE)), []).append(container)
    parts = []
    for role, members in roles.items():
        labels = members[0].get("labels", {})
        res = Resources(
            _label_float(str(labels.get(LABEL_CPU))),
            int(_label_float(str(labels.get(LABEL_MEM)))),
            int(_label_float(str(labels.get(LABEL_GPU)))),
        )
        image = members[0].get("image") or "?"
        parts.append(f"{role} x{len(members)} ({res.describe()}, image {image})")
    first = existing[0].get("labels", {})
    agents = sorted({str(c.get("agent")) for c in existing})
    return (
        f"{len(existing)} container(s): {'; '.join(parts)}; placed "
        f"{first.get(LABEL_MODE, '?')} on {', '.join(agents)}; resource group "
        f"{first.get(LABEL_RESOURCE_GROUP, '?')} (env, mounts and the requested mode "
        f"are compared through the spec hash)"
    )


def _check_inventory(
    spec: SessionSpec,
    kernels: Sequence[Kernel],
    assignment: Mapping[str, str],
    inventory: Mapping[str, Mapping[str, Any]],
) -> None:
    """Fail before anything is made if a chosen agent lacks an image or a mount source."""
    problems = []
    seen = set()
    for kernel in kernels:
        agent = assignment[kernel.hostname]
        images = inventory.get(agent, {}).get("images") or {}
        key = (agent, kernel.image)
        if kernel.image in images and not images[kernel.image] and key not in seen:
            seen.add(key)
            problems.append(
                f"image {kernel.image} not on agent {agent} (no registry is used: "
                f"build it with playbooks/image_build.yml or load it with docker "
                f"save/load)"
            )
    for agent in dict.fromkeys(assignment.values()):
        paths = inventory.get(agent, {}).get("paths") or {}
        for i, mount in enumerate(spec.mounts):
            if mount.src in paths and not paths[mount.src]:
                problems.append(
                    f"mounts[{i}].src: {mount.src} does not exist on agent {agent}; "
                    f"create the data folder there first"
                )
    if problems:
        raise SpecError("; ".join(problems))


# --- Networks: subnets from our own pool ----------------------------------------------
DEFAULT_SUBNET_POOL = "10.224.0.0/12"
DEFAULT_SUBNET_PREFIX = 24


def free_subnets(
    pool: str,
    prefix: int,
    used: Iterable[str],
    *,
    skip: Iterable[str] = (),
) -> Iterator[str]:
    """The ``/prefix`` subnets of ``pool``, in order, that overlap none of ``used``
    (subnets of the engine's networks) and are not in ``skip`` (lost races)."""
    try:
        net = ipaddress.ip_network(pool, strict=True)
    except ValueError as exc:
        raise SpecError(f"subnet_pool: got {pool!r}; {exc}") from None
    if not isinstance(prefix, int) or not net.prefixlen <= prefix <= net.max_prefixlen - 2:
        raise SpecError(
            f"subnet_prefix: got {prefix!r}; expected {net.prefixlen}.."
            f"{net.max_prefixlen - 2} for pool {pool}"
        )
    taken = []
    for text in used:
        try:
            taken.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    taken = [t for t in taken if t.version == net.version and t.overlaps(net)]
    skipped = {str(ipaddress.ip_network(s, strict=False)) for s in skip}
    return (
        str(candidate)
        for candidate in net.subnets(new_prefix=prefix)
        if str(candidate) not in skipped and not any(candidate.overlaps(t) for t in taken)
    )


def pick_subnet(
    pool: str,
    prefix: int,
    used: Iterable[str],
    *,
    skip: Iterable[str] = (),
    spread: int = 1,
    rng: Any = None,
) -> str:
    """A free ``/prefix`` of ``pool`` (see ``free_subnets``): the first one, or with
    ``spread`` > 1 a random one of the first ``spread`` free ones (``rng.choice``), so
    creates racing each other after a collision do not keep picking the same subnet.
    Docker's default address pools run out near 30 bridge networks; session networks
    come from this pool instead."""
    used = list(used)
    candidates = list(itertools.islice(free_subnets(pool, prefix, used, skip=skip), spread))
    if not candidates:
        raise SpecError(
            f"subnet_pool {pool}: no free /{prefix} left (the engine's networks use "
            f"{len(used)} subnets); give a bigger pool or remove unused session networks"
        )
    if spread > 1 and rng is not None:
        return str(rng.choice(candidates))
    return candidates[0]


# --- Listing sessions -----------------------------------------------------------------
def summarize_sessions(containers: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Group session containers (dicts with agent, name, state and labels, from every
    agent) into one row per session: name, session_id, size, mode, agents, state
    ("running", "stopped" or "partial"), running/found counts and the hosts."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for container in containers:
        labels = container.get("labels") or {}
        if LABEL_SESSION not in labels:
            continue
        key = (str(labels[LABEL_SESSION]), str(labels.get(LABEL_SESSION_ID, "")))
        groups.setdefault(key, []).append(container)
    rows = []
    for (name, sid), members in sorted(groups.items()):
        sizes = [int(_label_float(str(c["labels"].get(LABEL_SIZE)))) for c in members]
        size = max(sizes) if any(sizes) else len(members)
        running = sum(1 for c in members if c.get("state") == "running")
        if running == size and len(members) == size:
            state = "running"
        elif running == 0:
            state = "stopped" if len(members) == size else "partial"
        else:
            state = "partial"
        master = next(
            (c for c in members if c["labels"].get(LABEL_KERNEL_ID) == sid),
            members[0],
        )
        rows.append(
            {
                "name": name,
                "session_id": sid,
                "size": size,
                "found": len(members),
                "running": running,
                "mode": str(master["labels"].get(LABEL_MODE, "?")),
                "resource_group": str(master["labels"].get(LABEL_RESOURCE_GROUP, "?")),
                "agents": sorted({str(c.get("agent")) for c in members}),
                "hosts": sorted(str(c["labels"].get(LABEL_HOST)) for c in members),
                "state": state,
            }
        )
    return rows


def format_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Fixed-width lines for people: NAME SESSION-ID SIZE MODE AGENTS STATE."""
    header = ("NAME", "SESSION-ID", "SIZE", "MODE", "AGENTS", "STATE")
    body = [
        (
            str(r["name"]),
            str(r["session_id"]),
            str(r["size"]),
            str(r["mode"]),
            ",".join(r["agents"]),
            str(r["state"])
            + ("" if r["state"] == "running" else f" ({r['running']}/{r['size']} up)"),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
        for line in [header, *body]
    ]
