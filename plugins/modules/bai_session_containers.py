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
    source exists and lies under one of O(settings.data_roots) once symbolic links are resolved
    (then mounts the resolved path); derives the environment (the image's C(ENV), then
    the cluster variables of docs/environment.md); creates the container with its
    labels, hostname, CPU and memory limits (no swap), the mounts, C(init), attached
    B(only) to the session network O(network) with its hostname as alias; copies the
    session keys into C(/opt/bai/session) (an in-memory tar, root-only files) before the
    first start; starts it; then waits until sshd listens in every container.
  - GPUs - each container gets exactly the GPU devices of this agent that the plan gave
    it (C(kernels[].gpu_devices), the C(ai.backend.cluster.gpu-devices) label), found by
    the same detection as M(bai.cluster.bai_gpu_facts) - NVIDIA, a device request for those indices
    (O(settings.gpu_method=device_request), what C(docker run --gpus device=0,1) sends) or their
    CDI names (O(settings.gpu_method=cdi), C(nvidia.com/gpu=0)); AMD, C(/dev/kfd), the devices'
    render nodes and the C(video)/C(render) groups by number. Every container gets
    C(GPU_COUNT) and C(N_GPUS), the number of its GPUs (C(0) when none), over any value
    from the image; a container without GPUs on an NVIDIA agent also gets
    C(NVIDIA_VISIBLE_DEVICES=void). If a device is not among the detected ones (e.g.
    the agent's GPUs were only declared in C(bai_agent_resources.gpu)), the module fails
    before creating anything.
  - Confinement (docs/security.md) - every capability dropped but O(settings.capabilities) (plus
    C(IPC_LOCK) and C(SYS_NICE) for a container given GPUs or RDMA devices),
    C(no-new-privileges) (setuid programs gain nothing), at most O(settings.pids_limit) processes
    and threads. With O(settings.rdma), the agent's RDMA devices (C(/dev/infiniband/*)) are passed
    to every container.
  - For distributed jobs - C(/dev/shm) of C(kernels[].resources.shm) bytes (part of the
    memory limit), locked memory O(settings.memlock) and open files O(settings.nofile).
  - Only the master (rank 0, C(main1)) publishes a port - 2200/tcp on a host port from
    O(settings.port_range), on O(settings.publish_address) or this agent's address in
    O(settings.publish_network).
    Other containers publish nothing.
  - Admission (docs/placement.md) - before it creates or starts anything, under an
    exclusive lock on this agent's engine (a file in O(lock_dir)), the module lists every
    session container on the engine and refuses, naming what this agent offers and what
    holds it, unless the containers to create or start fit beside every other session
    container of this agent in B(any state) (a session holds what it was given until it
    is destroyed) - CPUs and memory within the offer (O(settings.resources), else the engine's
    own), each GPU device offered and held by no other container. The containers are
    created before the lock is released, so the next admission on this engine counts them.
    Each container is labelled with this agent's identity (C(ai.backend.cluster.agent-id))
    - its engine's Swarm node ID, else the engine ID, with C(/)O(settings.agent_id) for a virtual
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
    this agent - with O(session_id), only those of that session id (another instance of
    the same name keeps its containers) - and reports which; with O(networks), the
    session's networks on this agent too.
  - A batch session (O(job), docs/sessions.md) - every container runs the toolkit's job
    runner (copied into C(/opt/bai/job) before it starts) with Docker's restart policy
    C(no) - main1 waits for M(bai.cluster.bai_session_job) to start O(job.command), runs it
    and stops when it ends; the other members stop once main1 is gone. An ended batch
    session is never started again. O(state=absent) first stops its containers (SIGTERM;
    main1 stops the command, SIGKILL after O(grace_s)), keeps each one's output (its last
    O(log_max_bytes)) in O(log_dir)C(/SESSION-SESSION_ID/HOST.log) and returns RV(job).
  - O(session_id), O(agent), O(kernels) and O(mode) are required with O(state=present).
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  agent:
    description:
      - This agent's name as used in the plan (C(kernels[].agent)); required with
        O(state=present).
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
  job:
    description:
      - A batch session's command (C(command), one shell line, run in main1 as user
        C(work)) and C(grace_s), the seconds between SIGTERM and SIGKILL when it is
        stopped. Omit for an interactive session.
    type: dict
    suboptions:
      command:
        description: The command.
        type: str
        required: true
      grace_s:
        description: Seconds from SIGTERM to SIGKILL when the command is stopped.
        type: int
        default: 10
  grace_s:
    description:
      - With O(state=absent), the seconds a batch session's command gets between SIGTERM
        and SIGKILL.
    type: int
    default: 10
  stop:
    description:
      - With O(state=absent), stop every container first (C(docker stop) - SIGTERM to its
        main process, SIGKILL after O(grace_s) and 5 s more), not only a batch session's
        (whose command always gets them). Used when a session's lifetime is up.
    type: bool
    default: false
  before_attempt:
    description:
      - With O(state=absent) and O(session_id), only the containers of a batch session's
        attempts before this one (label C(ai.backend.cluster.restart-count)) - what an
        earlier attempt of a session that restarted left on an agent that did not answer.
    type: int
  log_dir:
    description:
      - With O(state=absent), the folder (on this agent, made 0700) where a batch
        session's output is kept; kept output older than 30 days is removed.
    type: path
    default: /var/lib/bai-cluster/logs
  log_max_bytes:
    description:
      - With O(state=absent), the most of each batch container's output that is kept (its
        end).
    type: int
    default: 1048576
  gpu_job_mapping_dir:
    description:
      - Folder (on this agent) of dcgm-exporter's job mapping - a file per GPU index holding
        the ids of the sessions that hold that GPU - rewritten from the engine's containers
        after the create or removal (docs/metrics.md). Made only once a session has a GPU
        here; an empty string keeps none.
    type: str
    default: /var/lib/bai-cluster/dcgm-job-mapping
  lock_dir:
    description:
      - Folder (on this agent) of the admission lock, one file per engine; made 0700.
    type: path
    default: /run/bai-cluster
  lock_timeout:
    description: Seconds to wait for the admission lock before failing.
    type: int
    default: 120
  state_dir:
    description:
      - Folder (on this agent) of the agent's own availability record, C(availability.json)
        (M(bai.cluster.bai_agent_availability)). Admission, under the lock, refuses a new
        session while it says this agent is paused or drained; a session with containers
        here is still repaired.
    type: path
    default: /var/lib/bai-cluster
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
  apps:
    description:
      - The session's own apps (C(session_apps); docs/apps.md), C(NAME:http:PORT) or
        C(NAME=http:PORT) each. main1 publishes their ports and its image's apps' (label
        C(ai.backend.service-ports)) beside its sshd's, on the publish address in the
        agent's port range, and records these in its label C(ai.backend.cluster.apps).
      - A name or port that collides with the image's apps makes the module fail before
        anything changes.
    type: list
    elements: raw
    default: []
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
      - After sshd listens, run the health gate from the master - it reaches every
        container of the session over SSH as user C(work) (RV(mesh)), and the checks of
        O(gate) across the session's links (RV(gate)). A member that fails is checked once
        more before the call fails, naming each failed check, its member and its agent.
    type: bool
    default: false
  gate:
    description: The health gate's options (docs/sessions.md, "The health gate").
    type: dict
    default: {}
    suboptions:
      checks:
        description: The checks to run; C(ssh) runs whatever this says.
        type: list
        elements: str
        choices: [ssh, dns, mtu, tcp, stream, data, clock, gpu, hook]
        default: [ssh, dns, mtu, tcp, stream, data, clock, gpu, hook]
      skew_s:
        description: How far a member's clock may be from main1's, in seconds.
        type: float
        default: 2.0
  host_addresses:
    description:
      - With O(state=present), also return this agent's IPv4 addresses (RV(host_addresses)),
        for the app proxy's route to main1 (the session playbooks ask main1's agent).
    type: bool
    default: false
  networks:
    description:
      - With O(state=absent), also remove the session's networks on this agent (not an
        overlay, which M(bai.cluster.bai_session_network) removes on a Swarm manager).
    type: bool
    default: false
  owner:
    description:
      - With O(state=absent), act for this owner only - fail, removing nothing on this
        agent, when a container of the session here is held by another owner (its owner
        label); with no container of the session here, its networks are left (session
        reconcile removes what no session uses).
    type: str
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
  - bai.cluster.attributes
  - bai.cluster.session
  - bai.cluster.agent_settings
  - bai.cluster.docker
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
gpu_job_mapping:
  description: Whether the GPU job mapping (O(gpu_job_mapping_dir)) changed; absent when not kept.
  returned: when the engine has GPU sessions, or had
  type: bool
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
host_addresses:
  description:
    - This agent's C(ip -o -4 addr show) lines, the addresses the app proxy's route picks
      main1's backend from.
  returned: O(host_addresses) and C(ip) answered
  type: list
  elements: str
mesh:
  description: One line per container, C(ok HOST), from the master's SSH check.
  returned: O(mesh_check) and containers were created or started
  type: list
  elements: str
gate:
  description:
    - The health gate - C(seconds) it took and C(members), each member's checks with
      what each found, e.g. for C(sub1) C(mtu) C(1450 rtt_ms=0.2) and C(clock) C(+0.001 s).
  returned: O(mesh_check) and containers were created or started
  type: dict
job:
  description:
    - A batch session's containers on this agent before they were removed - C(members)
      (C(host), C(main), C(agent), C(state), C(exit_code), C(oom_killed), C(finished_at)),
      C(status) (main1's status file when main1 was here - C(started), C(ended), C(exit),
      C(lost), C(cancelled) - else null), C(stopped) (the hosts that were still running)
      and C(kept) (the files their output was kept in).
  returned: O(state=absent), for a batch session
  type: dict
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

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import (
    with_host_addresses,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Failure,
    Refused,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers import gate
from ansible_collections.bai.cluster.plugins.module_utils.containers.removal import absent
from ansible_collections.bai.cluster.plugins.module_utils.containers.session_containers import (
    AgentShare,
    failure,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import (
    request_of,
    settings_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    connect,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module
from ansible_collections.bai.cluster.plugins.module_utils.gpu import job_mapping
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_settings
from ansible_collections.bai.cluster.plugins.module_utils.jobs.job import (
    DEFAULT_GRACE_S,
    DEFAULT_LOG_MAX_BYTES,
)
from ansible_collections.bai.cluster.plugins.module_utils.jobs.job_docker import DEFAULT_LOG_DIR
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import (
    SESSION_ARGUMENT_SPEC,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.ssh_keys import public_key_errors

ARGUMENT_SPEC = {
    **SESSION_ARGUMENT_SPEC,
    "agent": {"type": "str"},
    "kernels": {"type": "list", "elements": "dict", "default": []},
    "settings": {
        "type": "dict",
        "default": {},
        "apply_defaults": True,
        "options": agent_settings.argument_spec(),
    },
    "ledger_ids": {"type": "list", "elements": "str", "default": []},
    "lock_dir": {"type": "path", "default": "/run/bai-cluster"},
    "lock_timeout": {"type": "int", "default": 120},
    "state_dir": {"type": "path", "default": "/var/lib/bai-cluster"},
    "mode": {"type": "str", "choices": ["single-node", "multi-node"]},
    "network": {"type": "str"},
    "env": {"type": "dict", "default": {}},
    "mounts": {"type": "list", "elements": "dict", "default": []},
    "keypair": {"type": "dict", "no_log": True},
    "authorized_keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
    "apps": {"type": "list", "elements": "raw", "default": []},
    "ssh_timeout": {"type": "int", "default": 60},
    "network_spec": {"type": "dict"},
    "mesh_check": {"type": "bool", "default": False},
    "gate": gate.OPTION_SPEC,
    "host_addresses": {"type": "bool", "default": False},
    "networks": {"type": "bool", "default": False},
    "owner": {"type": "str"},
    "job": {
        "type": "dict",
        "options": {
            "command": {"type": "str", "required": True},
            "grace_s": {"type": "int", "default": DEFAULT_GRACE_S},
        },
    },
    "grace_s": {"type": "int", "default": DEFAULT_GRACE_S},
    "stop": {"type": "bool", "default": False},
    "before_attempt": {"type": "int"},
    "log_dir": {"type": "path", "default": DEFAULT_LOG_DIR},
    "log_max_bytes": {"type": "int", "default": DEFAULT_LOG_MAX_BYTES},
    "gpu_job_mapping_dir": {"type": "str", "default": job_mapping.DEFAULT_DIR},
    "workers": {"type": "int", "default": 8},
    **DOCKER_ARGUMENT_SPEC,
}


REQUIRED_IF = [("state", "present", ("session_id", "agent", "kernels", "mode"))]


def main() -> None:
    # Normally run in the controller's process when the agent is the controller itself
    # and the task is not async (plugins/action/bai_session_containers.py).
    run(
        AnsibleModule(
            argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF, supports_check_mode=True
        )
    )


def run(module: AnsibleModule) -> None:
    """Make or remove this agent's share of the session; exit with what was done."""
    key_problems = public_key_errors(module.params["authorized_keys"])
    if key_problems:
        module.fail_json(
            msg="authorized_keys: " + "; ".join(key_problems) + "; nothing was changed"
        )
    docker_ = connect(module)
    p = module.params
    shares: list[AgentShare] = []  # the one this call makes, once it is made

    def present() -> dict:
        try:
            request = request_of(p)
        except SpecError as exc:
            raise Failure(f"{exc}; nothing was changed") from None
        shares.append(AgentShare(module, docker_, request, settings_of(p)))
        made = shares[0].present()
        gpus = any(k.gpu_devices for k in request.kernels)
        return mapped(with_host_addresses(made, module.run_command, p["host_addresses"]), gpus)

    def mapped(done: dict, gpus: bool) -> dict:
        folder, locks = p["gpu_job_mapping_dir"], (p["lock_dir"], p["lock_timeout"])
        return job_mapping.kept_after(done, module, docker_.api, folder, locks, gpus)

    def removed() -> dict:
        return mapped(
            absent(
                docker_,
                module,
                session=p["session"],
                session_id=p["session_id"],
                agent=p["agent"],
                networks=p["networks"],
                workers=p["workers"],
                grace_s=p["grace_s"],
                stop=p["stop"],
                before_attempt=p["before_attempt"],
                log_dir=p["log_dir"],
                log_max_bytes=p["log_max_bytes"],
                owner=p["owner"],
            ),
            False,
        )

    run_module(
        module,
        removed if p["state"] == "absent" else present,
        (
            (Failure, DockerException),
            # refused: the agent's admission said no (the create places the session again).
            lambda exc: {
                "msg": failure(shares[0] if shares else None, exc),
                "refused": isinstance(exc, Refused),
                "agent": p["agent"],
            },
        ),
    )


if __name__ == "__main__":
    main()
