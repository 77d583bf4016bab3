"""One agent's share of a cluster session: its containers, made or removed.

The lifecycle behind plugins/modules/bai_session_containers.py, which only reads its
options into a :class:`Request` (the session, as the plan gave it) and :class:`Settings`
(this agent's), and reports what :class:`AgentShare` did:

- ``present``: sort what exists (create, start, keep); check images, mount sources,
  network and keys before anything is made; GPUs and the agent's offer; admission under
  the engine's lock; create in parallel; copy the keys in; start; wait for sshd; the SSH
  mesh check. Any failure removes what the call created (``cleanup``).
- ``absent``: remove the session's containers (and its local networks) on this agent.

The Docker client and the host (check mode, warnings, commands) are given to it, so the
unit tests drive it with stand-ins.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Busy,
    Failure,
    GpuError,
    Refused,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT_ID,
    LABEL_KERNEL_ID,
    LABEL_LEDGER,
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.locks import locked
from ansible_collections.bai.cluster.plugins.module_utils.common.ports import (
    parse_port_range,
    range_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers import mesh
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    error_text,
    find_network,
    image_env,
    in_swarm,
    last_exit_code,
    parallel,
    remove_containers,
    session_containers,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import format_device_label
from ansible_collections.bai.cluster.plugins.module_utils.gpu.common import VENDOR_NONE
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import HostProbe, detect
from ansible_collections.bai.cluster.plugins.module_utils.gpu.options import (
    docker_gpu_options,
    gpu_env,
)
from ansible_collections.bai.cluster.plugins.module_utils.jobs import job, job_docker
from ansible_collections.bai.cluster.plugins.module_utils.network import isolation, session_network
from ansible_collections.bai.cluster.plugins.module_utils.network.addresses import read_addresses
from ansible_collections.bai.cluster.plugins.module_utils.network.rdma import (
    device_mappings,
    rdma_devices,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import admission, availability
from ansible_collections.bai.cluster.plugins.module_utils.session.env import (
    cluster_env,
    parse_image_env,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    PlannedKernel,
    nano_cpus,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.mounts import (
    data_roots,
    resolved_source_error,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.security import (
    capabilities,
    host_security,
    publish_address,
    ulimits,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import SSH_PORT
from ansible_collections.bai.cluster.plugins.module_utils.session.ssh_keys import (
    SESSION_KEY_FILES,
    authorized_keys_tar,
    session_tar,
)


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
    # A batch session's command and stop grace period (module_utils/jobs/job.py); None for an
    # interactive session.
    job: Optional[Mapping[str, Any]] = None


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


SSHD_READY = b"Server listening on"


class AgentShare:
    """This agent's share of one session, and how to make it."""

    def __init__(self, module: Host, docker_: Any, request: Request, settings: Settings) -> None:
        self.module = module
        self.docker = docker_
        self.req = request
        self.cfg = settings
        self.mine = [k for k in request.kernels if k.agent == request.agent]
        if not self.mine:
            raise Failure(
                f"kernels: no container of session {request.session} is placed on agent "
                f"{request.agent} (the plan places them on "
                f"{', '.join(sorted({k.agent for k in request.kernels})) or 'no agent'}); pass "
                f"plan.kernels and one of its agents; nothing was changed"
            )
        if request.mesh_check and not any(k.rank == 0 for k in self.mine):
            raise Failure(
                f"mesh_check runs from the master, which the plan places on agent "
                f"{next((k.agent for k in request.kernels if k.rank == 0), '?')}, not on "
                f"{request.agent}; nothing was changed"
            )
        self.created: list[str] = []
        self.network_made = False
        self.lock = threading.Lock()
        # hostname -> (docker host_config options, environment) for its GPUs; gpu_setup.
        self.gpus: dict[str, tuple[dict, dict[str, str]]] = {}
        # Mount source -> the path it resolves to on this agent; check_mounts.
        self.sources: dict[str, str] = {}
        try:
            self.port_range = range_text(parse_port_range(self.cfg.port_range, "port_range"))
            self.caps = capabilities(self.cfg.capabilities)
            host_security(self.caps, pids_limit=self.cfg.pids_limit)
            self.ulimits, warnings = ulimits(
                memlock=self.cfg.memlock, nofile=self.cfg.nofile, ceiling=limits_ceiling()
            )
        except SpecError as exc:
            raise Failure(f"{exc}; nothing was changed") from None
        # Said when this call creates containers (the limits are theirs).
        self.limit_warnings = warnings
        self.publish_address = "0.0.0.0"
        # The session ledger that counts this session (O(ledger_ids)[0]), on every container.
        ids = self.req.ledger_ids or []
        self.ledger_label = {LABEL_LEDGER: ids[0]} if ids and ids[0] else {}
        # Who this agent is (admission.agent_identity) and its engine's ID; self.offer.
        self.identity = ""
        self.engine_id = ""
        # This agent's RDMA devices, for every container (settings.rdma).
        self.rdma = rdma_devices() if self.cfg.rdma else []

    # --- what exists ------------------------------------------------------------------
    def sort_existing(self) -> tuple[list, list, list]:
        """(kernels to create, [(kernel, container)] to start, [(kernel, container)] to keep)."""
        api = self.docker.api
        ours = {c["name"]: c for c in session_containers(api, self.req.session, self.req.agent)}
        names = [k.container_name for k in self.mine]
        taken = api.containers(all=True, filters={"name": [f"^/{n}$" for n in names]})
        foreign = sorted({c["Names"][0].lstrip("/") for c in taken} - set(ours) & set(names))
        if foreign:
            raise Failure(
                f"container name(s) {', '.join(foreign)} already used by containers that are "
                f"not part of session {self.req.session} on agent {self.req.agent}; remove "
                f"or rename them"
            )
        create: list[PlannedKernel] = []
        start: list[tuple[PlannedKernel, dict[str, Any]]] = []
        keep: list[tuple[PlannedKernel, dict[str, Any]]] = []
        for kernel in self.mine:
            found = ours.get(kernel.container_name)
            if found is None:
                create.append(kernel)
                continue
            labels = found["labels"]
            if (
                labels.get(LABEL_KERNEL_ID) != kernel.kernel_id
                or labels.get(LABEL_SESSION_ID) != self.req.session_id
            ):
                raise Failure(
                    f"container {found['name']} on agent {self.req.agent} belongs to another "
                    f"instance of session {self.req.session} (session id "
                    f"{labels.get(LABEL_SESSION_ID)}); nothing was changed; destroy that "
                    f"session first"
                )
            if self.req.job and found["state"] in ("exited", "dead"):
                raise Failure(
                    f"batch session {self.req.session} has ended ({found['name']} on agent "
                    f"{self.req.agent} is {found['state']}): it does not start again; destroy "
                    f"it (its output is kept: bai-cluster session logs) and run it anew"
                )
            (keep if found["state"] == "running" else start).append((kernel, found))
        return create, start, keep

    def precheck(self, create: list[PlannedKernel]) -> dict[str, dict[str, str]]:
        """Images, mount sources, network, keys: all checked before anything is made.
        Returns the ENV of each image needed."""
        api = self.docker.api
        agent = self.req.agent
        problems, envs = [], {}
        for image in dict.fromkeys(k.image for k in create):
            found = image_env(api, image)
            if found is None:
                problems.append(
                    f"image {image} not on agent {agent} (no registry is used: build it with "
                    f"playbooks/image_build.yml or load it with docker save/load)"
                )
            else:
                envs[image] = parse_image_env(found)
        problems += self.check_mounts()
        network = self.req.network
        if (
            network
            and not self.req.network_spec
            and not self.module.check_mode
            and find_network(api, network) is None
            and not in_swarm(api)
        ):
            # A swarm worker sees an attachable overlay only once a container joins it
            # (Docker asks the managers at create time), so only a plain engine can tell.
            problems.append(
                f"network {network} does not exist on agent {agent}; create it first "
                f"(bai_session_network)"
            )
        keypair = self.req.keypair or {}
        missing = [key for key in SESSION_KEY_FILES.values() if not keypair.get(key)]
        if missing:
            problems.append(
                f"keypair: {', '.join(missing)} missing; pass bai_session_keypair's keypair "
                f"to create containers"
            )
        if problems:
            raise Failure(
                f"cannot create session {self.req.session} on agent {agent}: "
                + "; ".join(problems)
                + "; nothing was created"
            )
        return envs

    def check_mounts(self) -> list[str]:
        """The mount policy, here on the agent: each source exists, and lies under a data
        root as given and once resolved. Fills self.sources (src -> resolved path)."""
        agent = self.req.agent
        problems = []
        try:
            roots = [os.path.realpath(root) for root in data_roots(self.cfg.data_roots)]
        except SpecError as exc:
            return [f"{exc} (agent {agent})"]
        for i, mount in enumerate(self.req.mounts):
            src = str(mount.get("src") or "")
            where = f"mounts[{i}].src"
            if not src.startswith("/") or not os.path.lexists(src):
                problems.append(
                    f"{where}: {src} does not exist on agent {agent}; create the data "
                    f"folder there first"
                )
                continue
            real = os.path.realpath(src)
            problem = resolved_source_error(src, real, file_kind(real), roots, where)
            if problem:
                problems.append(problem)
            else:
                self.sources[src] = real
        return problems

    # --- GPUs -------------------------------------------------------------------------
    def gpu_setup(self, create: list[PlannedKernel], facts: dict) -> None:
        """Check, before anything is made, that this agent has the devices the plan gave
        the containers (``facts``: what ``detect`` found here), and work out each one's
        Docker options and GPU variables."""
        vendor = str(facts.get("vendor") or VENDOR_NONE) if facts.get("count") else VENDOR_NONE
        agent = self.req.agent
        problems = []
        for kernel in create:
            devices = list(kernel.gpu_devices)  # as many as it asks for (PlannedKernel)
            options = {}
            if devices and vendor == VENDOR_NONE:
                why = facts.get("problem") or "no NVIDIA or AMD GPU was detected"
                problems.append(
                    f"{kernel.hostname} was given GPU device(s) "
                    f"{format_device_label(devices)} but {why} on agent {agent} (GPUs "
                    f"declared in bai_agent_resources.gpu alone only count for placement); "
                    f"converge the agent with site.yml (role gpu_runtime) or fix its driver"
                )
                continue
            if devices:
                try:
                    options = docker_gpu_options(facts, devices, method=self.cfg.gpu_method)
                except GpuError as exc:
                    problems.append(f"{kernel.hostname}: {exc}")
                    continue
            self.gpus[kernel.hostname] = (options, gpu_env(vendor, len(devices)))
        if problems:
            raise Failure(
                f"cannot create session {self.req.session} on agent {agent}: "
                + "; ".join(problems)
                + "; nothing was created"
            )

    # --- admission ----------------------------------------------------------------------
    def admit(self, create: list[PlannedKernel], start: list, offer: admission.Offer) -> None:
        """Refuse (Failure) unless what this run creates and starts fits on this agent
        beside every other session container of its slot on the engine, in any state."""
        listed = self.docker.api.containers(all=True, filters={"label": [LABEL_SESSION]})
        others = admission.foreign(listed, self.req.ledger_ids or ())
        if others:
            raise Failure(
                f"agent {self.req.agent} ({self.identity}) refuses session "
                f"{self.req.session}: its engine runs {admission.foreign_text(others)}, not "
                f"by this one ({self.req.ledger_ids[0]}); two ledgers would give its "
                f"capacity out twice. Create through that ledger (the inventory that made "
                f"them), or, if it is gone for good, adopt its sessions: bai-cluster session "
                f"reconcile --adopt-ledger ID; nothing was changed"
            )
        starting = {c["name"] for _kernel, c in start}
        mine = admission.holdings(listed, self.cfg.agent_id or "")
        self.admit_availability(mine)
        request = [h for h in mine if h.container in starting] + [
            admission.Holding(
                container=k.container_name,
                session=self.req.session,
                session_id=self.req.session_id,
                state="new",
                cpu=k.resources.cpu,
                mem=k.resources.mem,
                gpu_devices=k.gpu_devices,
            )
            for k in create
        ]
        held = [h for h in mine if h.container not in starting]
        decision = admission.admit(offer, held, request)
        if not decision.admitted:
            what = "created" if create else "changed"
            raise Refused(
                f"agent {self.req.agent} ({self.identity}) refuses session "
                f"{self.req.session}: {decision.reason}; nothing was {what}"
                + ("" if create else f"; {_recreate_hint(self.req.session)}")
            )

    def admit_availability(self, mine: list[admission.Holding]) -> None:
        """Refuse (Refused) a new session on an agent its own record says is paused or
        drained; a session with containers here is admitted (a rerun repairs it)."""
        try:
            own = availability.read_marker(self.cfg.state_dir).get(self.cfg.agent_id or "")
        except (OSError, ValueError) as exc:
            raise Failure(
                f"agent {self.req.agent}: cannot tell whether it is paused: {exc}; nothing "
                f"was changed"
            ) from None
        there = any(h.session_id == self.req.session_id for h in mine)
        why = availability.admits(own, session_there=there)
        if why:
            raise Refused(
                f"agent {self.req.agent} ({self.identity}) refuses session "
                f"{self.req.session}: {why}; nothing was created"
            )

    def admission_lock(self):
        """The engine's admission lock (none in check mode, which makes nothing)."""
        if self.module.check_mode:
            return nullcontext()
        return locked(admission.lock_path(self.cfg.lock_dir, self.engine_id), self.cfg.lock_timeout)

    def gpu_host_options(self, kernel: PlannedKernel, docker) -> dict:
        """create_host_config keyword arguments that give ``kernel`` exactly its GPUs."""
        options = dict(self.gpus.get(kernel.hostname, ({}, {}))[0])
        if options.get("device_requests"):
            options["device_requests"] = [
                docker.types.DeviceRequest(**request) for request in options["device_requests"]
            ]
        return options

    # --- making containers ------------------------------------------------------------
    def environment(self, kernel: PlannedKernel, image_vars: dict[str, str]) -> dict[str, str]:
        toolkit = cluster_env(
            [k.kernel for k in self.req.kernels],
            kernel.kernel,
            session_name=self.req.session,
            session_id=self.req.session_id,
            kernel_id=kernel.kernel_id,
            mode=self.req.mode,
            user_env={str(k): str(v) for k, v in self.req.env.items()},
            image_env=image_vars,
        )
        return {**image_vars, **toolkit, **self.gpus.get(kernel.hostname, ({}, {}))[1]}

    def make(self, kernel: PlannedKernel, env: dict[str, str], archive: bytes) -> str:
        import docker

        api = self.docker.api
        master = kernel.rank == 0
        network = self.req.network
        binds = [
            f"{self.sources[m['src']]}:{m['dst']}:{'ro' if m.get('readonly') else 'rw'}"
            for m in self.req.mounts
        ]
        extra = self.gpu_host_options(kernel, docker)
        if self.rdma:
            extra["devices"] = list(extra.get("devices") or []) + device_mappings(self.rdma)
        confinement = host_security(
            self.caps,
            no_new_privileges=self.cfg.no_new_privileges,
            pids_limit=self.cfg.pids_limit,
            devices=bool(list(kernel.gpu_devices) or self.rdma),
        )
        host_config = api.create_host_config(
            network_mode=network or None,
            init=True,
            nano_cpus=nano_cpus(kernel.resources),
            mem_limit=kernel.resources.mem,
            memswap_limit=kernel.resources.mem,
            shm_size=kernel.resources.shm_size,
            # A batch session's containers end with its command and never start again.
            restart_policy={"Name": "no" if self.req.job else self.cfg.restart_policy},
            ulimits=[docker.types.Ulimit(**u) for u in self.ulimits],
            binds=binds or None,
            port_bindings=({SSH_PORT: (self.publish_address, self.port_range)} if master else None),
            **confinement,
            **extra,
        )
        networking = None
        if network:
            networking = api.create_networking_config(
                {network: api.create_endpoint_config(aliases=[kernel.hostname])}
            )
        created = api.create_container(
            kernel.image,
            name=kernel.container_name,
            hostname=kernel.hostname,
            environment=[f"{key}={value}" for key, value in env.items()],
            labels={**kernel.labels, LABEL_AGENT_ID: self.identity, **self.ledger_label},
            host_config=host_config,
            networking_config=networking,
            ports=[SSH_PORT] if master else None,
            # A batch session: the job runner, which starts the image's entrypoint beside it.
            entrypoint=[job.RUNNER] if self.req.job else None,
            command=[job.MAIN if master else job.MEMBER] if self.req.job else None,
            detach=True,
            use_config_proxy=False,
        )
        cid = created["Id"]
        with self.lock:
            self.created.append(cid)
        if not api.put_archive(cid, "/opt/bai", archive):
            raise Failure(f"could not copy the session keys into {kernel.container_name}")
        if self.req.job and not api.put_archive(cid, "/opt/bai", self.runner(kernel)):
            raise Failure(f"could not copy the job runner into {kernel.container_name}")
        # People's public keys (option authorized_keys), beside the session key.
        if self.req.authorized_keys and not api.put_archive(
            cid, "/home/work/.ssh", authorized_keys_tar(self.req.authorized_keys)
        ):
            raise Failure(f"could not copy authorized_keys into {kernel.container_name}")
        return cid

    def runner(self, kernel: PlannedKernel) -> bytes:
        """A batch session's runner for ``kernel`` (job.runner_tar): main1 runs the
        command in the first data folder and watches every member; a member watches
        main1."""
        spec = self.req.job or {}
        hosts = [k.hostname for k in sorted(self.req.kernels, key=lambda k: k.rank)]
        main = kernel.rank == 0
        return job.runner_tar(
            main=main,
            command=str(spec.get("command") or ""),
            workdir=str(self.req.mounts[0]["dst"]) if self.req.mounts else "/home/work",
            peers=hosts[1:] if main else hosts[:1],
            grace_s=int(spec.get("grace_s") or job.DEFAULT_GRACE_S),
        )

    def wait_ssh(self, targets: list[tuple[str, str, Optional[int]]], began: int) -> None:
        """Wait until every (name, id, since) logs sshd's 'Server listening on'.

        since is None for a container this run created; began is when this run started them.
        """
        api = self.docker.api
        pending = {name: (cid, since) for name, cid, since in targets}
        deadline = time.monotonic() + self.cfg.ssh_timeout
        while pending:
            for name, (cid, since) in list(pending.items()):
                kwargs = {"since": since} if since else {}
                logs = api.logs(cid, stdout=True, stderr=True, **kwargs)
                if SSHD_READY in logs:
                    del pending[name]
                    continue
                info = api.inspect_container(cid)
                state = info["State"]
                # With a restart policy, a container that exits is started again at once:
                # for a new container, any restart means it stopped before sshd came up.
                if (
                    not state.get("Running")
                    or state.get("Restarting")
                    or (since is None and info.get("RestartCount"))
                ):
                    raise Failure(
                        f"container {name} on agent {self.req.agent} stopped (exit code "
                        f"{last_exit_code(api, cid, state, began)}) before sshd came up; its log "
                        f"ends: {_tail(logs)}"
                    )
            if not pending:
                break
            if time.monotonic() > deadline:
                raise Failure(
                    f"sshd did not start within {self.cfg.ssh_timeout}s in "
                    f"{', '.join(sorted(pending))} on agent {self.req.agent}; raise "
                    f"ssh_timeout if the agent is slow, or check the container logs"
                )
            time.sleep(0.1)

    def find_publish_address(self) -> str:
        """O(publish_address), else this agent's address in O(publish_network)."""
        explicit, network = self.cfg.publish_address, self.cfg.publish_network
        addresses: list[str] = []
        if network and not explicit:
            rc, out, err = self.module.run_command(["ip", "-o", "-4", "addr", "show"])
            if rc != 0:
                raise Failure(
                    f"cannot read the addresses of agent {self.req.agent} (ip addr: "
                    f"{err.strip()}); set publish_address; nothing was created"
                )
            addresses = read_addresses(out)
        try:
            return publish_address(explicit, network, addresses)
        except SpecError as exc:
            raise Failure(f"agent {self.req.agent}: {exc}; nothing was created") from None

    def ensure_network(self) -> dict | None:
        """The session's bridge, when this call is to make it (O(network_spec))."""
        spec = self.req.network_spec
        if not spec or not self.req.network:
            return None
        params = {
            **spec,
            "session": self.req.session,
            "session_id": self.req.session_id,
            "name": self.req.network,
        }
        made = session_network.present(self.docker.api, params, self.module.check_mode)
        self.network_made = bool(made["changed"]) and not self.module.check_mode
        return made

    def mesh_check(self) -> list[str]:
        """From the master (on this agent), one SSH login as user work to every container
        of the session; the lines of mesh.SCRIPT. Raises Failure when one fails."""
        api = self.docker.api
        master = next(k for k in self.mine if k.rank == 0)
        name = master.container_name
        hosts = [k.hostname for k in sorted(self.req.kernels, key=lambda k: k.rank)]
        exec_id = api.exec_create(name, ["bash", "-c", mesh.SCRIPT, "mesh", *hosts], user="work")
        out = api.exec_start(exec_id).decode("utf-8", "replace")
        failed = mesh.broken(out, api.exec_inspect(exec_id).get("ExitCode"))
        if failed:
            raise Failure(
                f"SSH from {master.hostname} does not reach every container: " + "; ".join(failed)
            )
        return [line for line in out.splitlines() if line.strip()]

    def present(self) -> dict:
        create, start, _keep = self.sort_existing()
        result = {
            "created": [k.container_name for k in create],
            "restarted": [c["name"] for _kernel, c in start],
            "removed": [],
        }
        if not create and not start:
            if self.req.mesh_check and not self.module.check_mode:
                result["mesh"] = self.mesh_check()
            return {"changed": False, **result, **self.report()}
        unguarded = isolation.table_problem(self.module, self.req.agent)
        if unguarded:
            raise Failure(
                f"cannot start session {self.req.session}: {unguarded}; nothing was created"
            )
        envs = self.precheck(create) if create else {}
        for warning in self.limit_warnings if create else []:
            self.module.warn(warning)
        facts = detect(HostProbe(module=self.module))
        self.gpu_setup(create, facts)
        offer = self.offer(facts)
        if any(k.rank == 0 for k in create):
            self.publish_address = self.find_publish_address()
        try:
            plans = [(k, self.environment(k, envs[k.image])) for k in create]
        except SpecError as exc:
            raise Failure(f"session {self.req.session}: {exc}; nothing was created") from None
        # A first look, without the lock: a session this agent refuses makes nothing (not
        # even its network). The look under the lock below is the one that counts.
        self.admit(create, start, offer)
        made = self.ensure_network() if create else None
        if made is not None:
            result["network"] = made["network"]
        if self.module.check_mode:
            return {"changed": True, **result, **self.report()}
        archive = session_tar(self.req.keypair or {}) if create else b""
        try:
            with self.admission_lock():
                self.admit(create, start, offer)
                # Made (not started) under the lock: the next admission counts them.
                outcomes = parallel(
                    lambda item: self.make(item[0], item[1], archive), plans, self.cfg.workers
                )
        except Busy:
            raise Failure(
                f"agent {self.req.agent}: the admission lock of its engine stayed taken for "
                f"{self.cfg.lock_timeout} s (another create holds it; if none runs, a stuck "
                f"process on this agent does); nothing was created"
            ) from None
        self.check_outcomes(result["created"], outcomes, "create")
        since = int(time.time())
        pairs = [(cid, k.image) for cid, (k, _env) in zip(outcomes, plans)]
        pairs += [(c["id"], kernel.image) for kernel, c in start]
        started = parallel(lambda pair: self.start(*pair), pairs, self.cfg.workers)
        self.check_outcomes(result["created"] + result["restarted"], started, "start")
        targets: list[tuple[str, str, Optional[int]]] = [
            (name, cid, None) for name, cid in zip(result["created"], outcomes)
        ]
        targets += [(c["name"], c["id"], since) for _kernel, c in start]
        self.wait_ssh(targets, since)
        if self.req.mesh_check:
            result["mesh"] = self.mesh_check()
        return {"changed": True, **result, **self.report()}

    def start(self, cid: str, image: str, attempts: int = 4) -> None:
        """Start a container. On a swarm worker, after its engine restarted, Docker 20.10
        may have lost the session overlay and answer "network ... not found" (or fail to
        attach): the worker then learns the overlay again, as at a first create, from a
        helper container created on it by name (never started, removed once the start
        went through or gave up), and the start is tried again (docs/sessions.md, "After
        a restart")."""
        api = self.docker.api
        helpers: list[str] = []
        try:
            for attempt in range(attempts):
                try:
                    api.start(cid)
                    return
                except DockerException as exc:
                    text = error_text(exc).lower()
                    lost = "network" in text and ("not found" in text or "attaching" in text)
                    if not (lost and self.req.network) or attempt == attempts - 1:
                        raise
                if not helpers:
                    self.module.warn(
                        f"agent {self.req.agent}: starting {cid[:12]} failed ({text}); "
                        f"asking the managers for network {self.req.network} again"
                    )
                    helpers.append(self.learn_network(image))
                time.sleep(1.0 + attempt)
        finally:
            remove_containers(self.docker, helpers)

    def learn_network(self, image: str) -> str:
        """Have this engine ask the managers for the session network: create a container
        attached to it by name; returns its id."""
        api = self.docker.api
        network = self.req.network
        helper = api.create_container(
            image,
            command=["true"],
            labels={LABEL_SESSION: self.req.session, LABEL_SESSION_ID: self.req.session_id},
            host_config=api.create_host_config(network_mode=network),
            networking_config=api.create_networking_config({network: api.create_endpoint_config()}),
            use_config_proxy=False,
        )
        return str(helper["Id"])

    def check_outcomes(self, names: list[str], outcomes: list, what: str) -> None:
        errors = [
            f"{name}: {error_text(out)}"
            for name, out in zip(names, outcomes)
            if isinstance(out, Exception)
        ]
        if errors:
            raise Failure(
                f"could not {what} session {self.req.session} on agent {self.req.agent}: "
                + "; ".join(errors)
            )

    def offer(self, facts: dict) -> admission.Offer:
        """What this agent offers (O(resources), else the engine's), and who it is."""
        info = self.docker.api.info()
        try:
            self.engine_id = str(info.get("ID") or "")
            self.identity = admission.agent_identity(
                admission.engine_identity(info), self.cfg.agent_id
            )
            offer, gpus = admission.offer_of(self.cfg.resources, info, facts)
        except (SpecError, GpuError, ValueError) as exc:
            raise Failure(f"agent {self.req.agent}: {exc}; nothing was created") from None
        if gpus["warning"] and any(k.resources.gpu for k in self.mine):
            self.module.warn(f"agent {self.req.agent}: {gpus['warning']}")
        return offer

    def report(self) -> dict:
        api = self.docker.api
        found = {c["name"]: c for c in session_containers(api, self.req.session, self.req.agent)}
        containers, ssh_port = [], None
        for kernel in self.mine:
            item = found.get(kernel.container_name, {})
            ports = item.get("ports", [])
            if kernel.rank == 0:
                ssh_port = next(
                    (p["host_port"] for p in ports if p["container_port"] == SSH_PORT), None
                )
            containers.append(
                {
                    "name": kernel.container_name,
                    "id": item.get("id"),
                    "host": kernel.hostname,
                    "role": kernel.role,
                    "idx": kernel.idx,
                    "kernel_id": kernel.kernel_id,
                    "agent": self.req.agent,
                    "state": item.get("state", "planned"),
                    "ports": ports,
                }
            )
        return {"containers": containers, "ssh_port": ssh_port}

    def cleanup(self) -> list[str]:
        """Remove what this call created; returns the failures, for the message."""
        failed = remove_containers(self.docker, list(self.created), self.cfg.workers)
        problems = [f"{cid[:12]}: {err}" for cid, err in failed]
        if self.network_made and not problems:
            try:
                session_network.absent(self.docker.api, self.req.session, self.req.network)
            except (Failure, DockerException) as exc:
                problems.append(f"network {self.req.network}: {exc}")
        return problems


def limits_ceiling() -> dict[str, int] | None:
    """This agent's own hard limits (bytes for memlock, -1 for none) when it cannot raise
    them - CAP_SYS_RESOURCE (bit 24) missing from the bounding set, as on some VMs and in
    unprivileged Docker-in-Docker nodes; then the engine cannot grant more either. None
    when it can."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            bounding = next(line for line in status if line.startswith("CapBnd:"))
    except (OSError, StopIteration):
        return None
    if int(bounding.split()[1], 16) & (1 << 24):
        return None
    import resource

    def hard(kind: int) -> int:
        value = resource.getrlimit(kind)[1]
        return -1 if value == resource.RLIM_INFINITY else value

    return {"memlock": hard(resource.RLIMIT_MEMLOCK), "nofile": hard(resource.RLIMIT_NOFILE)}


def file_kind(path: str) -> str:
    """What ``path`` is on this agent: directory, file, socket, device, ..."""
    mode = os.stat(path).st_mode
    for test, kind in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISREG, "file"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "named pipe"),
    ):
        if test(mode):
            return kind
    return "special file"


def _recreate_hint(session: str) -> str:
    return (
        f"destroy the session (playbooks/session_destroy.yml -e session_name={session}) "
        f"and create it again"
    )


def _tail(logs: bytes, lines: int = 5) -> str:
    text = logs.decode("utf-8", "replace").strip().splitlines()[-lines:]
    return " | ".join(text) if text else "(empty)"


def absent(
    docker_: Any,
    host: Host,
    *,
    session: str,
    session_id: Optional[str],
    agent: Optional[str],
    networks: bool,
    workers: int,
    grace_s: int = job.DEFAULT_GRACE_S,
    log_dir: str = job_docker.DEFAULT_LOG_DIR,
    log_max_bytes: int = job.DEFAULT_LOG_MAX_BYTES,
    stop: bool = False,
) -> dict[str, Any]:
    """Remove every container of ``session`` (of ``session_id`` when given) on this
    agent, and with ``networks`` the session's networks here.

    A batch session's containers are stopped first (main1's runner stops the command:
    SIGTERM, SIGKILL after ``grace_s``), then their output is kept under ``log_dir``
    (the last ``log_max_bytes`` of each) and what they came to is returned (``job``).
    With ``stop`` (a lifetime that is up) any session's containers are stopped first."""
    found = session_containers(docker_.api, session, agent)
    if session_id:
        found = [c for c in found if c["labels"].get(LABEL_SESSION_ID) == session_id]
    names = [c["name"] for c in found]
    batch = job_docker.batch_rows(found)
    report: Optional[dict[str, Any]] = None
    if batch and not host.check_mode:
        stopped = job_docker.stop(docker_.api, batch, grace_s, workers)
        report = {**job_docker.report(docker_.api, batch, agent or ""), "stopped": stopped}
        report["kept"] = job_docker.keep_logs(
            docker_.api, batch, session=session, log_dir=log_dir, cap=log_max_bytes
        )
        job_docker.prune_logs(log_dir)
    elif stop and found and not host.check_mode:
        job_docker.stop(docker_.api, found, grace_s, workers)
    if found and not host.check_mode:
        failed = remove_containers(docker_, [c["id"] for c in found], workers)
        if failed:
            raise Failure(
                f"could not remove container(s) of session {session}: "
                + "; ".join(f"{cid}: {err}" for cid, err in failed)
            )
    removed: list[str] = []
    if networks:
        removed = session_network.absent(
            docker_.api, session, None, host.check_mode, local_only=True
        )["removed"]
    done = {"changed": bool(names or removed), "removed": names, "networks_removed": removed}
    if report is not None:
        done["job"] = report
    return done
