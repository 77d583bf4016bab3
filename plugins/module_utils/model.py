"""The data a session is made of: resources, mounts, roles, the validated spec, kernels.

Pure logic (standard library only, Python 3.9+): Ansible ships these files to agents
(Debian's Python 3.11), and the unit tests use them without Docker or Ansible.
"""

from __future__ import annotations

from dataclasses import dataclass

MODE_SINGLE = "single-node"
MODE_MULTI = "multi-node"
MODES = (MODE_SINGLE, MODE_MULTI)
# CPU shares are compared as floats; this absorbs rounding noise such as 0.1 + 0.2.
CPU_EPSILON = 1e-6
# Docker's own /dev/shm size when none is given.
DOCKER_SHM = 64 * 1024**2


@dataclass(frozen=True)
class Resources:
    """What one container is given (or what an agent has free): CPUs, bytes, GPUs, and
    for a container the size of its /dev/shm in bytes (None: the default, half of mem).
    /dev/shm is part of mem (its pages count toward the container's memory limit), so
    placement counts mem alone and shm never adds to it."""

    cpu: float
    mem: int
    gpu: int
    shm: int | None = None

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
        text = f"cpu {format_cpu(self.cpu)}, mem {format_mem(self.mem)}, gpu {self.gpu}"
        return text if self.shm is None else f"{text}, shm {format_mem(self.shm)}"

    @property
    def shm_size(self) -> int:
        """The size of /dev/shm: shm when given, else half of mem (at least Docker's 64m
        when mem allows it)."""
        if self.shm is not None:
            return self.shm
        return min(self.mem, max(self.mem // 2, DOCKER_SHM))


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
