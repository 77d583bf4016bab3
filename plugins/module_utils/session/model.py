"""The data a session is made of: resources, mounts, roles, the validated spec, kernels.

Pure logic (no Ansible imports, Python 3.9+): Ansible ships these files to agents
(Debian's Python 3.11), and the unit tests use them without Docker or Ansible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.apps import App

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
    # "interactive" (lives until destroyed) or "batch" (runs ``command`` to its end).
    type: str = "interactive"
    command: Optional[str] = None
    # Who holds the session (module_utils/scheduling/queue/policies.py); "" for sessions made
    # before owners.
    # Not part of the spec's hash: who holds a session is not what it is.
    owner: str = ""
    # Seconds the session may run, from when it was placed (0: no limit); like the
    # owner, not part of the hash.
    lifetime_s: int = 0
    # The warning before the lifetime ends, "USR1@300" (session/signal_names.py); "" for
    # none. Not part of the hash either.
    end_signal: str = ""
    # Gang restarts of a batch session (session/restart_policy.py): how many times it may
    # start again, and the exit codes that count besides a lost agent, a signal or the
    # OOM killer. Not part of the hash.
    restarts: int = 0
    restart_on: tuple[int, ...] = ()
    # Whether a queued session of a higher priority may stop it, to be queued again
    # through its restarts (scheduling/queue/preemption.py). Not part of the hash.
    preemptible: bool = False
    # The session's own apps (session/apps.py; session_apps), routed by the app proxy.
    apps: tuple[App, ...] = ()
    # The topology level all its members run inside one domain of ("" for none;
    # session/topology_request.py). Not part of the hash: where it runs is not what it is.
    topology: str = ""
    # Seconds it waits in the queue for one domain of that level before widening to the
    # level above (0: it waits for one however long). Not part of the hash.
    topology_prefer_s: int = 0

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
class PlannedKernel(Kernel):
    """One container of a placed session, as the plan gives it to the agents: a kernel
    with the agent it runs on, its kernel id, container name, GPU devices and labels.

    The plan's ``kernels`` are ``to_dict()`` of these, and the agents read them back with
    ``from_dict`` into the same object (``resources.shm`` is always the size of
    /dev/shm here: the plan has settled it)."""

    agent: str
    kernel_id: str
    container_name: str
    gpu_devices: tuple[int, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def placed(cls, kernel: Kernel, **where: Any) -> PlannedKernel:
        """``kernel`` placed: ``where`` gives the fields a placement adds."""
        return cls(**{f.name: getattr(kernel, f.name) for f in fields(Kernel)}, **where)

    def to_dict(self) -> dict[str, Any]:
        """The plan's form (bai_session_ledger's RV kernels, bai_session_containers' input)."""
        res = self.resources
        return {
            "hostname": self.hostname,
            "role": self.role,
            "idx": self.idx,
            "rank": self.rank,
            "agent": self.agent,
            "kernel_id": self.kernel_id,
            "container_name": self.container_name,
            "image": self.image,
            "resources": {"cpu": res.cpu, "mem": res.mem, "gpu": res.gpu, "shm": res.shm_size},
            # The agent's GPU device indices this container is given ([] for none).
            "gpu_devices": list(self.gpu_devices),
            "labels": dict(self.labels),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PlannedKernel:
        """Read back ``to_dict()``; SpecError names an entry that is not one."""
        try:
            res = raw["resources"]
            resources = Resources(
                float(res["cpu"]),
                int(res["mem"]),
                int(res.get("gpu") or 0),
                int(res["shm"]) if res.get("shm") is not None else None,
            )
            planned = cls(
                role=str(raw["role"]),
                idx=int(raw["idx"]),
                hostname=str(raw["hostname"]),
                rank=int(raw["rank"]),
                image=str(raw["image"]),
                resources=resources,
                agent=str(raw["agent"]),
                kernel_id=str(raw["kernel_id"]),
                container_name=str(raw["container_name"]),
                gpu_devices=tuple(sorted({int(i) for i in raw.get("gpu_devices") or ()})),
                labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            where = raw.get("hostname", raw) if isinstance(raw, Mapping) else raw
            raise SpecError(
                f"kernels: entry {where!r} is not a kernel of the session's plan ({exc!r}); "
                f"pass plan.kernels unchanged"
            ) from None
        if len(planned.gpu_devices) != resources.gpu:
            raise SpecError(
                f"kernels: {planned.hostname} asks for {resources.gpu} GPU(s) but the plan "
                f"gave it devices {list(planned.gpu_devices)}; pass plan.kernels unchanged"
            )
        return planned


def with_shm(resources: Resources) -> Resources:
    """``resources`` with the size of /dev/shm settled (``shm_size``)."""
    return Resources(resources.cpu, resources.mem, resources.gpu, resources.shm_size)


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
