#!/usr/bin/python
"""Ansible module bai_session_containers: one agent's share of a session's containers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_containers
short_description: Create (in parallel) or remove one agent's containers of a cluster session
description:
  - Runs on a compute agent (usually with C(delegate_to)).
  - O(state=present) creates, in one call and in parallel, every kernel of O(kernels) whose
    C(agent) is O(agent) - checks first that each image is on this agent and each mount
    source exists and lies under one of O(data_roots) once symbolic links are resolved
    (then mounts the resolved path); derives the environment (the image's C(ENV), then
    the cluster variables of docs/environment.md); creates the container with its
    labels, hostname, CPU and memory limits (no swap), the mounts, C(init), attached
    B(only) to the session network O(network) with its hostname as alias; copies the
    session keys into C(/opt/bai/session) (an in-memory tar, root-only files) before the
    first start; starts it; then waits until sshd listens in every container.
  - GPUs - each container gets exactly the GPU devices of this agent that the plan gave
    it (C(kernels[].gpu_devices), the C(ai.backend.cluster.gpu-devices) label), found by
    the same detection as M(bai.cluster.bai_gpu_facts) - NVIDIA, a device request for those indices
    (O(gpu_method=device_request), what C(docker run --gpus device=0,1) sends) or their
    CDI names (O(gpu_method=cdi), C(nvidia.com/gpu=0)); AMD, C(/dev/kfd), the devices'
    render nodes and the C(video)/C(render) groups by number. Every container gets
    C(GPU_COUNT) and C(N_GPUS), the number of its GPUs (C(0) when none), over any value
    from the image; a container without GPUs on an NVIDIA agent also gets
    C(NVIDIA_VISIBLE_DEVICES=void). If a device is not among the detected ones (e.g.
    the agent's GPUs were only declared in C(bai_agent_resources.gpu)), the module fails
    before creating anything.
  - Confinement (docs/security.md) - every capability dropped but O(capabilities) (plus
    C(IPC_LOCK) and C(SYS_NICE) for a container given GPUs or RDMA devices),
    C(no-new-privileges) (setuid programs gain nothing), at most O(pids_limit) processes
    and threads. With O(rdma), the agent's RDMA devices (C(/dev/infiniband/*)) are passed
    to every container.
  - For distributed jobs - C(/dev/shm) of C(kernels[].resources.shm) bytes (part of the
    memory limit), locked memory O(memlock) and open files O(nofile).
  - Only the master (rank 0, C(main1)) publishes a port - 2200/tcp on a host port from
    O(port_range), on O(publish_address) or this agent's address in O(publish_network).
    Other containers publish nothing.
  - Admission (docs/placement.md) - before it creates or starts anything, under an
    exclusive lock on this agent's engine (a file in O(lock_dir)), the module lists every
    session container on the engine and refuses, naming what this agent offers and what
    holds it, unless the containers to create or start fit beside every other session
    container of this agent in B(any state) (a session holds what it was given until it
    is destroyed) - CPUs and memory within the offer (O(resources), else the engine's
    own), each GPU device offered and held by no other container. The containers are
    created before the lock is released, so the next admission on this engine counts them.
    Each container is labelled with this agent's identity (C(ai.backend.cluster.agent-id))
    - its engine's Swarm node ID, else the engine ID, with C(/)O(agent_id) for a virtual
    agent.
  - Containers of the same session and kernel id that already exist are left alone
    (started if stopped, once admitted), so a re-run changes nothing. A container of the
    same name from another session instance makes the module fail without touching
    anything.
  - Any failure removes every container this call created before the module fails.
  - With O(network_spec), the session's bridge O(network) is made first, in the same call
    (a single-agent session then costs one module run on its agent); with O(mesh_check),
    once sshd listens, the master (which must be on this agent) logs in over SSH as user
    C(work) to every container of O(kernels), all at once, and the module fails (removing
    what it made) naming any container it cannot reach.
  - O(state=absent) removes (force) every container labelled with session O(session) on
    this agent and reports which; with O(networks), the session's networks on this agent
    too.
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  state:
    description: Whether the containers should exist.
    type: str
    choices: [present, absent]
    default: present
  session:
    description: The session name.
    type: str
    required: true
  session_id:
    description:
      - The session id. Required with O(state=present).
      - With O(state=absent), remove only containers of this session id (the containers of
        another instance of the same name stay).
    type: str
  agent:
    description:
      - This agent's name as used in the plan (C(kernels[].agent)); required with
        O(state=present).
    type: str
  agent_id:
    description:
      - The inventory's C(bai_agent_id) - for several inventory agents on one engine on
        purpose (virtual agents), each its own slot of the engine with its own offer (any
        text without C(/), unique per engine). Omit for an agent that is its whole engine.
    type: str
  ledger_ids:
    description:
      - The session ledger that counts this session
        (RV(bai.cluster.bai_session_ledger#module:ledger_ids)) - its identity first, then
        the ledgers it adopted. The first is written on every container (label
        C(ai.backend.cluster.ledger)); admission refuses while the engine
        runs sessions that another ledger counts (a second ledger would give the agent's
        capacity out twice). Empty - no check, no label.
    type: list
    elements: str
    default: []
  resources:
    description:
      - What this agent offers to sessions (the inventory's C(bai_agent_resources) - any of
        C(cpu), C(mem), C(gpu)); what is not given is what the engine reports (NCPU,
        MemTotal; detected GPUs always win). Admission checks every create and start
        against it.
    type: dict
  lock_dir:
    description:
      - Folder (on this agent) of the admission lock, one file per engine; made 0700.
    type: path
    default: /run/bai-cluster
  lock_timeout:
    description: Seconds to wait for the admission lock before failing.
    type: int
    default: 120
  kernels:
    description:
      - Every kernel of the session in kernel order (bai_session_plan's C(kernels)), each with
        C(hostname), C(role), C(idx), C(rank), C(agent), C(kernel_id), C(container_name),
        C(image), C(resources) (C(cpu), C(mem) bytes, C(gpu)) and C(labels).
      - All of them are needed to derive the cluster environment; only those of O(agent) are
        created.
    type: list
    elements: dict
    default: []
  mode:
    description:
      - The mode as placed (bai_session_plan's C(mode)); required with O(state=present).
    type: str
    choices: [single-node, multi-node]
  network:
    description: The session network to attach to (omit for the engine's default bridge).
    type: str
  env:
    description: The user's environment variables (bai_session_plan's C(spec.env)).
    type: dict
    default: {}
  mounts:
    description:
      - Host folders to mount, each C(src), C(dst), C(readonly) (bai_session_plan's
        C(spec.mounts)).
    type: list
    elements: dict
    default: []
  data_roots:
    description:
      - This agent's data roots (C(bai_data_roots)); every mount source must lie under one
        of them, as given and once symbolic links are resolved here, and be a folder or a
        regular file. A root may not be, hold or lie under a system path (C(/etc),
        C(/proc), C(/var/lib/docker), ...).
    type: list
    elements: str
    default: [/srv/bai-data]
  keypair:
    description:
      - The session keys from M(bai.cluster.bai_session_keypair) (C(private_key),
        C(public_key), C(host_private_key), C(host_public_key)). Needed only when a
        container must be created.
    type: dict
  authorized_keys:
    description:
      - People's SSH public keys (one OpenSSH public key line each), allowed to log in as
        C(work) in every container beside the session key, e.g. through the app proxy
        (C(ssh -p PORT work@APPPROXY)) into C(main1).
      - Written to C(~work/.ssh/authorized_keys2) (root-owned, 0644; sshd reads it by
        default) before the first start, so only containers created by this call get them.
      - An entry that is not one public key line makes the module fail before anything changes.
    type: list
    elements: str
    default: []
  port_range:
    description:
      - Host ports the master's sshd (2200/tcp) may be published on; Docker picks a free one.
    type: str
    default: 30000-31000
  publish_address:
    description:
      - Host address the master's port is published on. Default this agent's address in
        O(publish_network), else every address (C(0.0.0.0)).
    type: str
  publish_network:
    description:
      - The compute zone (a CIDR); without O(publish_address), the master's port is
        published on this agent's address in it, and the module fails if it has none.
    type: str
  capabilities:
    description:
      - The Linux capabilities session containers keep (all others are dropped); the
        default is what the entrypoint and sshd need (docs/security.md). C(IPC_LOCK) and
        C(SYS_NICE) are added for containers given GPUs.
    type: list
    elements: str
    default: [CHOWN, DAC_OVERRIDE, FOWNER, SETUID, SETGID, SYS_CHROOT, KILL, AUDIT_WRITE]
  no_new_privileges:
    description:
      - Start containers with C(no-new-privileges) (setuid programs and file capabilities
        gain nothing).
    type: bool
    default: true
  pids_limit:
    description: Processes and threads per container (C(0) for no limit).
    type: int
    default: 16384
  memlock:
    description:
      - Bytes of memory a process may lock (C(ulimit -l)), soft and hard; C(-1) for no
        limit (what NCCL, RDMA and pinned-memory data loaders need).
    type: int
    default: -1
  nofile:
    description: Open files per process (C(ulimit -n)), soft and hard.
    type: int
    default: 1048576
  restart_policy:
    description:
      - Docker's restart policy for the containers. V(unless-stopped) brings a session back
        whole after its agent's engine (or the agent) restarts - the containers start
        again with the same environment, keys, hostnames and sshd - while a
        container someone stopped stays stopped (list and show report the session
        C(degraded); creating it again starts it).
    type: str
    choices: ["no", unless-stopped, always]
    default: unless-stopped
  rdma:
    description:
      - Give every container this agent's RDMA devices (every character device under
        C(/dev/infiniband)) when it has any, with C(IPC_LOCK) and C(SYS_NICE); false gives
        none.
    type: bool
    default: true
  gpu_method:
    description:
      - How NVIDIA GPUs are handed to a container - V(device_request) (any engine >= 19.03
        with the NVIDIA container toolkit) or V(cdi) (CDI device names; Docker >= 25 with
        CDI enabled and the spec that the C(bai.cluster.gpu_runtime) role generates). AMD
        GPUs are always passed as device nodes.
    type: str
    choices: [device_request, cdi]
    default: device_request
  ssh_timeout:
    description: Seconds to wait for sshd to listen in every container.
    type: int
    default: 60
  network_spec:
    description:
      - Make the session network O(network) on this agent before the containers, with
        these options of M(bai.cluster.bai_session_network) - C(driver) (C(bridge)),
        C(labels), C(subnet_pool), C(subnet_prefix), C(mtu). It is removed again if the
        call fails.
    type: dict
  mesh_check:
    description:
      - After sshd listens, check from the master that it reaches every container of the
        session over SSH as user C(work) (RV(mesh)).
    type: bool
    default: false
  networks:
    description:
      - With O(state=absent), also remove the session's networks on this agent (not an
        overlay, which M(bai.cluster.bai_session_network) removes on a Swarm manager).
    type: bool
    default: false
  workers:
    description: Containers created at the same time.
    type: int
    default: 8
notes:
  - O(keypair) is C(no_log); the module never returns keys.
attributes:
  check_mode:
    support: full
    description: Reports what would be created, started or removed.
  diff_mode:
    support: none
    description: Returns no diff; RV(created), RV(restarted) and RV(removed) say what changed.
  idempotent:
    support: full
    description:
      - Containers of the same session and kernel id that already exist are kept (stopped
        ones are started), so a second run reports no change.
extends_documentation_fragment:
  - bai.cluster.docker
requirements:
  - docker SDK for Python 5.0 or later (Debian python3-docker works)
"""

EXAMPLES = r"""
- name: Create this agent's containers of the session
  bai.cluster.bai_session_containers:
    session: "{{ plan.summary.name }}"
    session_id: "{{ plan.session_id }}"
    agent: agent1
    kernels: "{{ plan.kernels }}"
    mode: "{{ plan.mode }}"
    network: "{{ plan.network.name if plan.network else omit }}"
    env: "{{ plan.spec.env }}"
    mounts: "{{ plan.spec.mounts }}"
    keypair: "{{ keys.keypair }}"
  delegate_to: agent1

- name: Remove the session's containers on one agent
  bai.cluster.bai_session_containers:
    session: train
    state: absent
"""

RETURN = r"""
containers:
  description:
    - This agent's containers of the session, in kernel order - C(name), C(id), C(host),
      C(role), C(idx), C(kernel_id), C(agent), C(state), C(ports) (published ports).
  returned: state=present
  type: list
  elements: dict
created:
  description: Names of the containers created (or that would be, in check mode).
  returned: state=present
  type: list
  elements: str
restarted:
  description:
    - Names of existing, stopped containers that were started again.
    - (Not called C(started), a key async_status reserves for jobs still running.)
  returned: state=present
  type: list
  elements: str
removed:
  description: Names of the containers removed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
network:
  description:
    - The network O(network_spec) made or found (as M(bai.cluster.bai_session_network)
      returns it).
  returned: O(network_spec) and containers were created
  type: dict
mesh:
  description: One line per container, C(ok HOST), from the master's SSH check.
  returned: O(mesh_check) and containers were created or started
  type: list
  elements: str
networks_removed:
  description: The session's networks removed with O(networks).
  returned: O(state=absent)
  type: list
  elements: str
ssh_port:
  description: Host port of the master's sshd when the master runs on this agent, else null.
  returned: state=present
  type: int
refused:
  description:
    - On failure, whether this agent's admission refused the session (what its engine holds
      leaves no room); session_create.yml then places the session again, once, with a fresh
      read of this agent.
  returned: failure
  type: bool
agent:
  description: On failure, O(agent) (which agent failed, in a loop over agents).
  returned: failure
  type: str
"""

import hashlib
import os
import stat
import threading
import time
from contextlib import nullcontext

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils import admission, session_network
from ansible_collections.bai.cluster.plugins.module_utils.appproxy import (
    authorized_keys_tar,
    public_key_errors,
)
from ansible_collections.bai.cluster.plugins.module_utils.docker_api import (
    DOCKER_ARGUMENT_SPEC,
    DockerException,
    connect,
    error_text,
    find_network,
    image_env,
    in_swarm,
    last_exit_code,
    parallel,
    remove_containers,
    session_containers,
    session_tar,
)
from ansible_collections.bai.cluster.plugins.module_utils.env import cluster_env, parse_image_env
from ansible_collections.bai.cluster.plugins.module_utils.errors import (
    Failure,
    Refused,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu import (
    LABEL_GPU_DEVICES,
    VENDOR_NONE,
    GpuError,
    HostProbe,
    detect,
    docker_gpu_options,
    format_device_label,
    gpu_env,
    parse_device_label,
)
from ansible_collections.bai.cluster.plugins.module_utils.labels import (
    LABEL_AGENT_ID,
    LABEL_KERNEL_ID,
    LABEL_LEDGER,
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.locks import Busy, locked
from ansible_collections.bai.cluster.plugins.module_utils.model import Kernel, Resources, nano_cpus
from ansible_collections.bai.cluster.plugins.module_utils.mounts import (
    DEFAULT_DATA_ROOT,
    data_roots,
    resolved_source_error,
)
from ansible_collections.bai.cluster.plugins.module_utils.rdma import (
    device_mappings,
    rdma_devices,
)
from ansible_collections.bai.cluster.plugins.module_utils.security import (
    DEFAULT_CAPABILITIES,
    DEFAULT_NOFILE,
    DEFAULT_PIDS_LIMIT,
    capabilities,
    host_security,
    publish_address,
    ulimits,
)
from ansible_collections.bai.cluster.plugins.module_utils.spec import SSH_PORT

KEY_FILES = {
    "id_cluster": "private_key",
    "id_cluster.pub": "public_key",
    "host_key": "host_private_key",
    "host_key.pub": "host_public_key",
}
SSHD_READY = b"Server listening on"
# Run in the master as user work with the session's hostnames as arguments: one SSH login
# to each, all at once; prints "ok HOST" or "FAILED HOST: what ssh said" per host.
MESH_CHECK = r"""set -u
dir=$(mktemp -d)
for h in "$@"; do
  ( ssh -o BatchMode=yes -o ConnectTimeout=10 "$h" hostname > "$dir/$h" 2> "$dir/$h.err" ) &
done
wait
rc=0
for h in "$@"; do
  got=$(tail -n 1 "$dir/$h")
  if [ "$got" = "$h" ]; then echo "ok $h"; else
    echo "FAILED $h: $(cat "$dir/$h" "$dir/$h.err" | tail -n 5 | tr '\n' ' ' | sed 's/ *$//')"; rc=1
  fi
done
rm -rf "$dir"
exit $rc
"""


def to_kernel(raw: dict) -> Kernel:
    res = raw.get("resources") or {}
    try:
        return Kernel(
            role=str(raw["role"]),
            idx=int(raw["idx"]),
            hostname=str(raw["hostname"]),
            rank=int(raw["rank"]),
            image=str(raw["image"]),
            resources=Resources(
                float(res["cpu"]),
                int(res["mem"]),
                int(res.get("gpu") or 0),
                int(res["shm"]) if res.get("shm") is not None else None,
            ),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise Failure(
            f"kernels: entry {raw.get('hostname', raw)!r} is not a bai_session_plan kernel "
            f"({exc!r}); pass plan.kernels unchanged"
        ) from None


class Session:
    """This agent's share of one session, and how to make it."""

    def __init__(self, module: AnsibleModule, docker_) -> None:
        self.module = module
        self.docker = docker_
        self.p = module.params
        self.kernels = [to_kernel(raw) for raw in self.p["kernels"]]
        self.raw = {raw["hostname"]: raw for raw in self.p["kernels"]}
        self.mine = [
            k for k in self.kernels if self.raw[k.hostname].get("agent") == self.p["agent"]
        ]
        self.created: list[str] = []
        self.network_made = False
        self.lock = threading.Lock()
        # hostname -> (docker host_config options, environment) for its GPUs; gpu_setup.
        self.gpus: dict[str, tuple[dict, dict[str, str]]] = {}
        # Mount source -> the path it resolves to on this agent; check_mounts.
        self.sources: dict[str, str] = {}
        try:
            self.caps = capabilities(self.p["capabilities"])
            host_security(self.caps, pids_limit=self.p["pids_limit"])
            self.ulimits, warnings = ulimits(
                memlock=self.p["memlock"], nofile=self.p["nofile"], ceiling=limits_ceiling()
            )
        except SpecError as exc:
            raise Failure(f"{exc}; nothing was changed") from None
        for warning in warnings:
            module.warn(warning)
        self.publish_address = "0.0.0.0"
        # The session ledger that counts this session (O(ledger_ids)[0]), on every container.
        ids = self.p["ledger_ids"] or []
        self.ledger_label = {LABEL_LEDGER: ids[0]} if ids and ids[0] else {}
        # Who this agent is (admission.agent_identity) and its engine's ID; self.offer.
        self.identity = ""
        self.engine_id = ""
        # This agent's RDMA devices, for every container (O(rdma)).
        self.rdma = rdma_devices() if self.p["rdma"] else []

    # --- what exists ------------------------------------------------------------------
    def sort_existing(self) -> tuple[list, list, list]:
        """(kernels to create, [(kernel, container)] to start, [(kernel, container)] to keep)."""
        api = self.docker.api
        ours = {c["name"]: c for c in session_containers(api, self.p["session"], self.p["agent"])}
        names = [self.raw[k.hostname]["container_name"] for k in self.mine]
        taken = api.containers(all=True, filters={"name": [f"^/{n}$" for n in names]})
        foreign = sorted({c["Names"][0].lstrip("/") for c in taken} - set(ours) & set(names))
        if foreign:
            raise Failure(
                f"container name(s) {', '.join(foreign)} already used by containers that are "
                f"not part of session {self.p['session']} on agent {self.p['agent']}; remove "
                f"or rename them"
            )
        create, start, keep = [], [], []
        for kernel in self.mine:
            raw = self.raw[kernel.hostname]
            found = ours.get(raw["container_name"])
            if found is None:
                create.append(kernel)
                continue
            labels = found["labels"]
            if (
                labels.get(LABEL_KERNEL_ID) != raw["kernel_id"]
                or labels.get(LABEL_SESSION_ID) != self.p["session_id"]
            ):
                raise Failure(
                    f"container {found['name']} on agent {self.p['agent']} belongs to another "
                    f"instance of session {self.p['session']} (session id "
                    f"{labels.get(LABEL_SESSION_ID)}); nothing was changed; destroy that "
                    f"session first"
                )
            (keep if found["state"] == "running" else start).append((kernel, found))
        return create, start, keep

    def precheck(self, create: list[Kernel]) -> dict[str, dict[str, str]]:
        """Images, mount sources, network, keys: all checked before anything is made.
        Returns the ENV of each image needed."""
        api = self.docker.api
        agent = self.p["agent"]
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
        network = self.p["network"]
        if (
            network
            and not self.p["network_spec"]
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
        keypair = self.p["keypair"] or {}
        missing = [key for key in KEY_FILES.values() if not keypair.get(key)]
        if missing:
            problems.append(
                f"keypair: {', '.join(missing)} missing; pass bai_session_keypair's keypair "
                f"to create containers"
            )
        if problems:
            raise Failure(
                f"cannot create session {self.p['session']} on agent {agent}: "
                + "; ".join(problems)
                + "; nothing was created"
            )
        return envs

    def check_mounts(self) -> list[str]:
        """The mount policy, here on the agent: each source exists, and lies under a data
        root as given and once resolved. Fills self.sources (src -> resolved path)."""
        agent = self.p["agent"]
        problems = []
        try:
            roots = [os.path.realpath(root) for root in data_roots(self.p["data_roots"])]
        except SpecError as exc:
            return [f"{exc} (agent {agent})"]
        for i, mount in enumerate(self.p["mounts"]):
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
    def gpu_devices(self, kernel: Kernel) -> list[int]:
        """The device indices the plan gave ``kernel`` (its label as a fallback)."""
        raw = self.raw[kernel.hostname]
        if raw.get("gpu_devices") is not None:
            return sorted({int(i) for i in raw["gpu_devices"]})
        return parse_device_label((raw.get("labels") or {}).get(LABEL_GPU_DEVICES))

    def gpu_setup(self, create: list[Kernel], facts: dict) -> None:
        """Check, before anything is made, that this agent has the devices the plan gave
        the containers (``facts``: what ``detect`` found here), and work out each one's
        Docker options and GPU variables."""
        vendor = str(facts.get("vendor") or VENDOR_NONE) if facts.get("count") else VENDOR_NONE
        agent = self.p["agent"]
        problems = []
        for kernel in create:
            devices = self.gpu_devices(kernel)
            if len(devices) != kernel.resources.gpu:
                problems.append(
                    f"{kernel.hostname} asks for {kernel.resources.gpu} GPU(s) but the plan "
                    f"gave it devices [{format_device_label(devices)}]; pass plan.kernels "
                    f"unchanged"
                )
                continue
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
                    options = docker_gpu_options(facts, devices, method=self.p["gpu_method"])
                except GpuError as exc:
                    problems.append(f"{kernel.hostname}: {exc}")
                    continue
            self.gpus[kernel.hostname] = (options, gpu_env(vendor, len(devices)))
        if problems:
            raise Failure(
                f"cannot create session {self.p['session']} on agent {agent}: "
                + "; ".join(problems)
                + "; nothing was created"
            )

    # --- admission ----------------------------------------------------------------------
    def admit(self, create: list[Kernel], start: list, offer: admission.Offer) -> None:
        """Refuse (Failure) unless what this run creates and starts fits on this agent
        beside every other session container of its slot on the engine, in any state."""
        listed = self.docker.api.containers(all=True, filters={"label": [LABEL_SESSION]})
        others = admission.foreign(listed, self.p["ledger_ids"] or ())
        if others:
            raise Failure(
                f"agent {self.p['agent']} ({self.identity}) refuses session "
                f"{self.p['session']}: its engine runs {admission.foreign_text(others)}, not "
                f"by this one ({self.p['ledger_ids'][0]}); two ledgers would give its "
                f"capacity out twice. Create through that ledger (the inventory that made "
                f"them), or, if it is gone for good, adopt its sessions: bai-cluster session "
                f"reconcile --adopt-ledger ID; nothing was changed"
            )
        starting = {c["name"] for _kernel, c in start}
        mine = admission.holdings(listed, self.p["agent_id"] or "")
        request = [h for h in mine if h.container in starting] + [
            admission.Holding(
                container=self.raw[k.hostname]["container_name"],
                session=self.p["session"],
                session_id=self.p["session_id"],
                state="new",
                cpu=k.resources.cpu,
                mem=k.resources.mem,
                gpu_devices=tuple(self.gpu_devices(k)),
            )
            for k in create
        ]
        held = [h for h in mine if h.container not in starting]
        decision = admission.admit(offer, held, request)
        if not decision.admitted:
            what = "created" if create else "changed"
            raise Refused(
                f"agent {self.p['agent']} ({self.identity}) refuses session "
                f"{self.p['session']}: {decision.reason}; nothing was {what}"
                + ("" if create else f"; {_recreate_hint(self.p['session'])}")
            )

    def admission_lock(self):
        """The engine's admission lock (none in check mode, which makes nothing)."""
        if self.module.check_mode:
            return nullcontext()
        digest = hashlib.sha256(self.engine_id.encode()).hexdigest()[:16]
        return locked(
            os.path.join(self.p["lock_dir"], f"admission-{digest}.lock"), self.p["lock_timeout"]
        )

    def gpu_host_options(self, kernel: Kernel, docker) -> dict:
        """create_host_config keyword arguments that give ``kernel`` exactly its GPUs."""
        options = dict(self.gpus.get(kernel.hostname, ({}, {}))[0])
        if options.get("device_requests"):
            options["device_requests"] = [
                docker.types.DeviceRequest(**request) for request in options["device_requests"]
            ]
        return options

    # --- making containers ------------------------------------------------------------
    def environment(self, kernel: Kernel, image_vars: dict[str, str]) -> dict[str, str]:
        toolkit = cluster_env(
            self.kernels,
            kernel,
            session_name=self.p["session"],
            session_id=self.p["session_id"],
            kernel_id=self.raw[kernel.hostname]["kernel_id"],
            mode=self.p["mode"],
            user_env={str(k): str(v) for k, v in self.p["env"].items()},
            image_env=image_vars,
        )
        return {**image_vars, **toolkit, **self.gpus.get(kernel.hostname, ({}, {}))[1]}

    def make(self, kernel: Kernel, env: dict[str, str], archive: bytes) -> str:
        import docker

        api = self.docker.api
        raw = self.raw[kernel.hostname]
        master = kernel.rank == 0
        network = self.p["network"]
        binds = [
            f"{self.sources[m['src']]}:{m['dst']}:{'ro' if m.get('readonly') else 'rw'}"
            for m in self.p["mounts"]
        ]
        extra = self.gpu_host_options(kernel, docker)
        if self.rdma:
            extra["devices"] = list(extra.get("devices") or []) + device_mappings(self.rdma)
        confinement = host_security(
            self.caps,
            no_new_privileges=self.p["no_new_privileges"],
            pids_limit=self.p["pids_limit"],
            devices=bool(self.gpu_devices(kernel) or self.rdma),
        )
        host_config = api.create_host_config(
            network_mode=network or None,
            init=True,
            nano_cpus=nano_cpus(kernel.resources),
            mem_limit=kernel.resources.mem,
            memswap_limit=kernel.resources.mem,
            shm_size=kernel.resources.shm_size,
            restart_policy={"Name": self.p["restart_policy"]},
            ulimits=[docker.types.Ulimit(**u) for u in self.ulimits],
            binds=binds or None,
            port_bindings=(
                {SSH_PORT: (self.publish_address, self.p["port_range"])} if master else None
            ),
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
            name=raw["container_name"],
            hostname=kernel.hostname,
            environment=[f"{key}={value}" for key, value in env.items()],
            labels={**raw["labels"], LABEL_AGENT_ID: self.identity, **self.ledger_label},
            host_config=host_config,
            networking_config=networking,
            ports=[SSH_PORT] if master else None,
            detach=True,
            use_config_proxy=False,
        )
        cid = created["Id"]
        with self.lock:
            self.created.append(cid)
        if not api.put_archive(cid, "/opt/bai", archive):
            raise Failure(f"could not copy the session keys into {raw['container_name']}")
        # People's public keys (option authorized_keys), beside the session key.
        if self.p["authorized_keys"] and not api.put_archive(
            cid, "/home/work/.ssh", authorized_keys_tar(self.p["authorized_keys"])
        ):
            raise Failure(f"could not copy authorized_keys into {raw['container_name']}")
        return cid

    def wait_ssh(self, targets: list[tuple[str, str, int | None]], began: int) -> None:
        """Wait until every (name, id, since) logs sshd's 'Server listening on'.

        since is None for a container this run created; began is when this run started them.
        """
        api = self.docker.api
        pending = {name: (cid, since) for name, cid, since in targets}
        deadline = time.monotonic() + self.p["ssh_timeout"]
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
                        f"container {name} on agent {self.p['agent']} stopped (exit code "
                        f"{last_exit_code(api, cid, state, began)}) before sshd came up; its log "
                        f"ends: {_tail(logs)}"
                    )
            if not pending:
                break
            if time.monotonic() > deadline:
                raise Failure(
                    f"sshd did not start within {self.p['ssh_timeout']}s in "
                    f"{', '.join(sorted(pending))} on agent {self.p['agent']}; raise "
                    f"ssh_timeout if the agent is slow, or check the container logs"
                )
            time.sleep(0.1)

    def find_publish_address(self) -> str:
        """O(publish_address), else this agent's address in O(publish_network)."""
        explicit, network = self.p["publish_address"], self.p["publish_network"]
        addresses: list[str] = []
        if network and not explicit:
            rc, out, err = self.module.run_command(["ip", "-o", "-4", "addr", "show"])
            if rc != 0:
                raise Failure(
                    f"cannot read the addresses of agent {self.p['agent']} (ip addr: "
                    f"{err.strip()}); set publish_address; nothing was created"
                )
            addresses = [
                fields[3].split("/")[0]
                for fields in map(str.split, out.splitlines())
                if len(fields) > 3
            ]
        try:
            return publish_address(explicit, network, addresses)
        except SpecError as exc:
            raise Failure(f"agent {self.p['agent']}: {exc}; nothing was created") from None

    def ensure_network(self) -> dict | None:
        """The session's bridge, when this call is to make it (O(network_spec))."""
        spec = self.p["network_spec"]
        if not spec or not self.p["network"]:
            return None
        params = {
            **spec,
            "session": self.p["session"],
            "session_id": self.p["session_id"],
            "name": self.p["network"],
        }
        made = session_network.present(self.docker.api, params, self.module.check_mode)
        self.network_made = bool(made["changed"]) and not self.module.check_mode
        return made

    def mesh_check(self) -> list[str]:
        """From the master (on this agent), one SSH login as user work to every container
        of the session; the lines of MESH_CHECK. Raises Failure when one fails."""
        api = self.docker.api
        master = next(k for k in self.mine if k.rank == 0)
        name = self.raw[master.hostname]["container_name"]
        hosts = [k.hostname for k in sorted(self.kernels, key=lambda k: k.rank)]
        exec_id = api.exec_create(name, ["bash", "-c", MESH_CHECK, "mesh", *hosts], user="work")
        out = api.exec_start(exec_id).decode("utf-8", "replace")
        code = api.exec_inspect(exec_id).get("ExitCode")
        lines = [line for line in out.splitlines() if line.strip()]
        if code != 0:
            broken = [line for line in lines if not line.startswith("ok ")] or [f"exit {code}"]
            raise Failure(
                f"SSH from {master.hostname} does not reach every container: " + "; ".join(broken)
            )
        return lines

    def present(self) -> dict:
        create, start, _keep = self.sort_existing()
        result = {
            "created": [self.raw[k.hostname]["container_name"] for k in create],
            "restarted": [c["name"] for _kernel, c in start],
            "removed": [],
        }
        if not create and not start:
            return {"changed": False, **result, **self.report()}
        envs = self.precheck(create) if create else {}
        facts = detect(HostProbe(module=self.module))
        self.gpu_setup(create, facts)
        offer = self.offer(facts)
        if any(k.rank == 0 for k in create):
            self.publish_address = self.find_publish_address()
        made = self.ensure_network() if create else None
        if made is not None:
            result["network"] = made["network"]
        try:
            plans = [(k, self.environment(k, envs[k.image])) for k in create]
        except SpecError as exc:
            raise Failure(f"session {self.p['session']}: {exc}; nothing was created") from None
        if self.module.check_mode:
            self.admit(create, start, offer)
            return {"changed": True, **result, **self.report()}
        keypair = self.p["keypair"] or {}
        archive = (
            session_tar({name: keypair[key].encode() for name, key in KEY_FILES.items()})
            if create
            else b""
        )
        try:
            with self.admission_lock():
                self.admit(create, start, offer)
                # Made (not started) under the lock: the next admission counts them.
                outcomes = parallel(
                    lambda item: self.make(item[0], item[1], archive), plans, self.p["workers"]
                )
        except Busy:
            raise Failure(
                f"agent {self.p['agent']}: the admission lock of its engine stayed taken for "
                f"{self.p['lock_timeout']} s (another create holds it; if none runs, a stuck "
                f"process on this agent does); nothing was created"
            ) from None
        self.check_outcomes(result["created"], outcomes, "create")
        since = int(time.time())
        pairs = [(cid, k.image) for cid, (k, _env) in zip(outcomes, plans)]
        pairs += [(c["id"], kernel.image) for kernel, c in start]
        started = parallel(lambda pair: self.start(*pair), pairs, self.p["workers"])
        self.check_outcomes(result["created"] + result["restarted"], started, "start")
        targets = [(name, cid, None) for name, cid in zip(result["created"], outcomes)]
        targets += [(c["name"], c["id"], since) for _kernel, c in start]
        self.wait_ssh(targets, since)
        if self.p["mesh_check"]:
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
                    if not (lost and self.p["network"]) or attempt == attempts - 1:
                        raise
                if not helpers:
                    self.module.warn(
                        f"agent {self.p['agent']}: starting {cid[:12]} failed ({text}); "
                        f"asking the managers for network {self.p['network']} again"
                    )
                    helpers.append(self.learn_network(image))
                time.sleep(1.0 + attempt)
        finally:
            remove_containers(self.docker, helpers)

    def learn_network(self, image: str) -> str:
        """Have this engine ask the managers for the session network: create a container
        attached to it by name; returns its id."""
        api = self.docker.api
        network = self.p["network"]
        helper = api.create_container(
            image,
            command=["true"],
            labels={LABEL_SESSION: self.p["session"], LABEL_SESSION_ID: self.p["session_id"]},
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
                f"could not {what} session {self.p['session']} on agent {self.p['agent']}: "
                + "; ".join(errors)
            )

    def offer(self, facts: dict) -> admission.Offer:
        """What this agent offers (O(resources), else the engine's), and who it is."""
        info = self.docker.api.info()
        try:
            self.engine_id = str(info.get("ID") or "")
            self.identity = admission.agent_identity(
                admission.engine_identity(info), self.p["agent_id"]
            )
            offer, gpus = admission.offer_of(self.p["resources"], info, facts)
        except (SpecError, GpuError, ValueError) as exc:
            raise Failure(f"agent {self.p['agent']}: {exc}; nothing was created") from None
        if gpus["warning"] and any(k.resources.gpu for k in self.mine):
            self.module.warn(f"agent {self.p['agent']}: {gpus['warning']}")
        return offer

    def report(self) -> dict:
        api = self.docker.api
        found = {c["name"]: c for c in session_containers(api, self.p["session"], self.p["agent"])}
        containers, ssh_port = [], None
        for kernel in self.mine:
            raw = self.raw[kernel.hostname]
            item = found.get(raw["container_name"], {})
            ports = item.get("ports", [])
            if kernel.rank == 0:
                ssh_port = next(
                    (p["host_port"] for p in ports if p["container_port"] == SSH_PORT), None
                )
            containers.append(
                {
                    "name": raw["container_name"],
                    "id": item.get("id"),
                    "host": kernel.hostname,
                    "role": kernel.role,
                    "idx": kernel.idx,
                    "kernel_id": raw["kernel_id"],
                    "agent": self.p["agent"],
                    "state": item.get("state", "planned"),
                    "ports": ports,
                }
            )
        return {"containers": containers, "ssh_port": ssh_port}

    def cleanup(self) -> list[str]:
        """Remove what this call created; returns the failures, for the message."""
        failed = remove_containers(self.docker, list(self.created), self.p["workers"])
        problems = [f"{cid[:12]}: {err}" for cid, err in failed]
        if self.network_made and not problems:
            try:
                session_network.absent(self.docker.api, self.p["session"], self.p["network"])
            except (Failure, DockerException) as exc:
                problems.append(f"network {self.p['network']}: {exc}")
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


def absent(module: AnsibleModule, docker_) -> dict:
    session, session_id = module.params["session"], module.params["session_id"]
    found = session_containers(docker_.api, session, module.params["agent"])
    if session_id:
        found = [c for c in found if c["labels"].get(LABEL_SESSION_ID) == session_id]
    names = [c["name"] for c in found]
    if found and not module.check_mode:
        failed = remove_containers(docker_, [c["id"] for c in found], module.params["workers"])
        if failed:
            raise Failure(
                f"could not remove container(s) of session {session}: "
                + "; ".join(f"{cid}: {err}" for cid, err in failed)
            )
    networks: list[str] = []
    if module.params["networks"]:
        networks = session_network.absent(
            docker_.api, session, None, module.check_mode, local_only=True
        )["removed"]
    return {"changed": bool(names or networks), "removed": names, "networks_removed": networks}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "session": {"type": "str", "required": True},
            "session_id": {"type": "str"},
            "agent": {"type": "str"},
            "kernels": {"type": "list", "elements": "dict", "default": []},
            "agent_id": {"type": "str"},
            "ledger_ids": {"type": "list", "elements": "str", "default": []},
            "resources": {"type": "dict"},
            "lock_dir": {"type": "path", "default": "/run/bai-cluster"},
            "lock_timeout": {"type": "int", "default": 120},
            "mode": {"type": "str", "choices": ["single-node", "multi-node"]},
            "network": {"type": "str"},
            "env": {"type": "dict", "default": {}},
            "mounts": {"type": "list", "elements": "dict", "default": []},
            "keypair": {"type": "dict", "no_log": True},
            "authorized_keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
            "data_roots": {"type": "list", "elements": "str", "default": [DEFAULT_DATA_ROOT]},
            "port_range": {"type": "str", "default": "30000-31000"},
            "publish_address": {"type": "str"},
            "publish_network": {"type": "str"},
            "capabilities": {
                "type": "list",
                "elements": "str",
                "default": list(DEFAULT_CAPABILITIES),
            },
            "no_new_privileges": {"type": "bool", "default": True},
            "pids_limit": {"type": "int", "default": DEFAULT_PIDS_LIMIT},
            "memlock": {"type": "int", "default": -1},
            "rdma": {"type": "bool", "default": True},
            "restart_policy": {
                "type": "str",
                "choices": ["no", "unless-stopped", "always"],
                "default": "unless-stopped",
            },
            "nofile": {"type": "int", "default": DEFAULT_NOFILE},
            "gpu_method": {
                "type": "str",
                "choices": ["device_request", "cdi"],
                "default": "device_request",
            },
            "ssh_timeout": {"type": "int", "default": 60},
            "network_spec": {"type": "dict"},
            "mesh_check": {"type": "bool", "default": False},
            "networks": {"type": "bool", "default": False},
            "workers": {"type": "int", "default": 8},
            **DOCKER_ARGUMENT_SPEC,
        },
        required_if=[("state", "present", ("session_id", "agent", "kernels", "mode"))],
        supports_check_mode=True,
    )
    key_problems = public_key_errors(module.params["authorized_keys"])
    if key_problems:
        module.fail_json(
            msg="authorized_keys: " + "; ".join(key_problems) + "; nothing was changed"
        )
    docker_ = connect(module)
    session = None
    try:
        if module.params["state"] == "absent":
            module.exit_json(**absent(module, docker_))
        session = Session(module, docker_)
        result = session.present()
    except (Failure, DockerException) as exc:
        msg = str(exc) if isinstance(exc, Failure) else f"Docker error: {error_text(exc)}"
        if session is not None and (session.created or session.network_made):
            leftovers = session.cleanup()
            msg += f"; removed the {len(session.created)} container(s) this run had created"
            if session.network_made:
                msg += f" and network {module.params['network']}"
            if leftovers:
                msg += f" (except: {'; '.join(leftovers)})"
        # refused: the agent's admission said no (the create places the session again).
        module.fail_json(msg=msg, refused=isinstance(exc, Refused), agent=module.params["agent"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
