"""One agent's share of a session, as the phases of its making see it (the modules
beside this one: prechecks, admit, create, readiness, removal; session_containers.py
runs them in order).

    Host        what the lifecycle needs of the host it runs on (an AnsibleModule is one)
    Request     the session as the plan gave it, and what this call is to do on an agent
    Settings    this agent's settings
    Share       what every phase reads, and what the earlier ones found
    request_of(params), settings_of(params)    both from bai_session_containers' options
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import availability
from ansible_collections.bai.cluster.plugins.module_utils.session.apps import App, parse_declared
from ansible_collections.bai.cluster.plugins.module_utils.session.model import PlannedKernel


class Host(Protocol):
    """What the lifecycle needs of the host it runs on (an AnsibleModule is one)."""

    check_mode: bool

    def warn(self, warning: str) -> None: ...

    def run_command(self, args: Any) -> Any: ...

    def get_bin_path(self, arg: Any) -> Any: ...


@dataclass(frozen=True)
class Request:
    """The session as the plan gave it, and what this call is to do on ``agent``."""

    session: str
    session_id: str
    agent: str
    mode: str
    kernels: tuple[PlannedKernel, ...]
    network: Optional[str] = None
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[Mapping[str, Any]] = ()
    keypair: Optional[Mapping[str, str]] = field(default=None, repr=False)  # secret
    authorized_keys: Sequence[str] = ()
    ledger_ids: Sequence[str] = ()
    network_spec: Optional[Mapping[str, Any]] = None
    mesh_check: bool = False
    # The health gate's options (containers/gate.py): checks, skew_s.
    gate: Mapping[str, Any] = field(default_factory=dict)
    # A batch session's command and stop grace period (module_utils/jobs/job.py); None for an
    # interactive session.
    job: Optional[Mapping[str, Any]] = None
    # The session's own apps (session/apps.py): main1 publishes their ports.
    apps: tuple[App, ...] = ()


@dataclass(frozen=True)
class Settings:
    """This agent's settings (the module's options of the same names; their defaults
    are the module's argument spec)."""

    agent_id: Optional[str]
    resources: Optional[Mapping[str, Any]]
    data_roots: Sequence[str]
    port_range: str
    publish_address: Optional[str]
    publish_network: Optional[str]
    capabilities: Sequence[str]
    no_new_privileges: bool
    pids_limit: int
    memlock: int
    nofile: int
    rdma: bool
    restart_policy: str
    gpu_method: str
    ssh_timeout: int
    lock_dir: str
    lock_timeout: int
    workers: int
    state_dir: str = availability.DEFAULT_STATE_DIR


class Share:
    """The state the phases share; :class:`AgentShare` (session_containers.py) fills it
    in and runs the phases over it."""

    module: Host
    docker: Any
    req: Request
    cfg: Settings
    # The kernels of the plan placed on this agent.
    mine: list[PlannedKernel]
    # What this call created (ids; removed again on a failure) and whether it made the
    # session's network; ``lock`` guards ``created`` from the create threads.
    created: list[str]
    network_made: bool
    lock: threading.Lock
    # hostname -> (docker host_config options, environment) for its GPUs; prechecks.gpu_setup.
    gpus: dict[str, tuple[dict, dict[str, str]]]
    # Mount source -> the path it resolves to on this agent; prechecks.check_mounts.
    sources: dict[str, str]
    # The confinement every container gets (settings, checked once).
    port_range: str
    caps: list[str]
    ulimits: list[dict[str, Any]]
    # Said when this call creates containers (the limits are theirs).
    limit_warnings: list[str]
    publish_address: str
    # The apps each image declares (its ai.backend.service-ports label); prechecks.precheck.
    image_apps: dict[str, tuple[App, ...]]
    # main1's apps, its image's and the session's own (when this call creates main1).
    main_apps: tuple[App, ...]
    # The session ledger that counts this session (O(ledger_ids)[0]), on every container.
    ledger_label: dict[str, str]
    # Who this agent is (agent_identity.agent_identity) and its engine's ID; admit.offer.
    identity: str
    engine_id: str
    # This agent's RDMA devices, for every container (settings.rdma).
    rdma: list[str]


# bai_session_containers' options that describe the session (the rest are settings).
REQUEST_OPTIONS = (
    "session",
    "session_id",
    "agent",
    "mode",
    "network",
    "env",
    "mounts",
    "keypair",
    "authorized_keys",
    "ledger_ids",
    "network_spec",
    "mesh_check",
    "gate",
    "job",
    "apps",
)


def request_of(params: Mapping[str, Any]) -> Request:
    """The module's options that describe the session (SpecError names a bad kernel)."""
    kernels = tuple(PlannedKernel.from_dict(raw) for raw in params["kernels"])
    options = {key: params[key] for key in REQUEST_OPTIONS}
    options["env"] = {str(k): str(v) for k, v in (params["env"] or {}).items()}
    options["apps"] = parse_declared(params["apps"])
    return Request(kernels=kernels, **options)


def settings_of(params: Mapping[str, Any]) -> Settings:
    """This agent's settings (option settings, validated by its argument spec) and the
    module's own limits."""
    own = ("ssh_timeout", "lock_dir", "lock_timeout", "workers", "state_dir")
    return Settings(**params["settings"], **{key: params[key] for key in own})
