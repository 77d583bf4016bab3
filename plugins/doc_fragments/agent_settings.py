"""Documentation of an agent's settings: bai_session_containers' option ``settings``.

They are ``agent_settings.argument_spec()`` in plugins/module_utils/hosts/agent_settings.py
(one setting a suboption, each read from an inventory variable of the agent); the session
playbooks pass ``hostvars[agent] | bai.cluster.bai_agent_settings(groups)``.
"""

from __future__ import annotations


class ModuleDocFragment:
    """The option ``settings`` (``agent_settings.argument_spec()``)."""

    DOCUMENTATION = r"""
---
options:
  settings:
    description:
      - This agent's settings, validated here as a whole; the session playbooks pass
        C(hostvars[agent] | bai.cluster.bai_agent_settings(groups)), the inventory variables
        set on the agent (each setting below names its variable). A setting not given takes
        its default.
    type: dict
    default: {}
    suboptions:
      agent_id:
        description:
          - The inventory's C(bai_agent_id) - for several inventory agents on one engine on
            purpose (virtual agents), each its own slot of the engine with its own offer (any
            text without C(/), unique per engine). Omit for an agent that is its whole engine.
          - Inventory variable C(bai_agent_id).
        type: str
      resources:
        description:
          - What this agent offers to sessions (the inventory's C(bai_agent_resources) - any of
            C(cpu), C(mem), C(gpu)); what is not given is what the engine reports (NCPU,
            MemTotal; detected GPUs always win). Admission checks every create and start
            against it.
          - Inventory variable C(bai_agent_resources).
        type: dict
      data_roots:
        description:
          - This agent's data roots (C(bai_data_roots)); every mount source must lie under one
            of them, as given and once symbolic links are resolved here, and be a folder or a
            regular file. A root may not be, hold or lie under a system path (C(/etc),
            C(/proc), C(/var/lib/docker), ...).
          - Inventory variable C(bai_data_roots), else C([bai_data_root]).
        type: list
        elements: str
        default: [/srv/bai-data]
      port_range:
        description:
          - Host ports the master's sshd (2200/tcp) may be published on; Docker picks a free one.
          - Inventory variable C(bai_container_port_range).
        type: str
        default: 30000-31000
      publish_address:
        description:
          - Host address the master's port is published on. Default this agent's address in
            O(settings.publish_network), else every address (C(0.0.0.0)).
          - Inventory variable C(bai_session_publish_address).
        type: str
      publish_network:
        description:
          - The compute zone (a CIDR); without O(settings.publish_address), the master's port is
            published on this agent's address in it, and the module fails if it has none.
          - Inventory variable C(bai_zone_cidrs.compute).
        type: str
      capabilities:
        description:
          - The Linux capabilities session containers keep (all others are dropped); the
            default is what the entrypoint and sshd need (docs/security.md). C(IPC_LOCK) and
            C(SYS_NICE) are added for containers given GPUs.
          - Inventory variable C(bai_session_capabilities).
        type: list
        elements: str
        default: [CHOWN, DAC_OVERRIDE, FOWNER, SETUID, SETGID, SYS_CHROOT, KILL, AUDIT_WRITE]
      no_new_privileges:
        description:
          - Start containers with C(no-new-privileges) (setuid programs and file capabilities
            gain nothing).
          - Inventory variable C(bai_session_no_new_privileges).
        type: bool
        default: true
      pids_limit:
        description:
          - Processes and threads per container (C(0) for no limit).
          - Inventory variable C(bai_session_pids_limit).
        type: int
        default: 16384
      memlock:
        description:
          - Bytes of memory a process may lock (C(ulimit -l)), soft and hard; C(-1) for no
            limit (what NCCL, RDMA and pinned-memory data loaders need).
          - Inventory variable C(bai_session_memlock).
        type: int
        default: -1
      nofile:
        description:
          - Open files per process (C(ulimit -n)), soft and hard.
          - Inventory variable C(bai_session_nofile).
        type: int
        default: 1048576
      restart_policy:
        description:
          - Docker's restart policy for the containers. V(unless-stopped) brings a session back
            whole after its agent's engine (or the agent) restarts - the containers start
            again with the same environment, keys, hostnames and sshd - while a
            container someone stopped stays stopped (list and show report the session
            C(degraded); creating it again starts it).
          - Inventory variable C(bai_session_restart_policy).
        type: str
        choices: ["no", unless-stopped, always]
        default: unless-stopped
      rdma:
        description:
          - Give every container this agent's RDMA devices (every character device under
            C(/dev/infiniband)) when it has any, with C(IPC_LOCK) and C(SYS_NICE); false gives
            none.
          - Inventory variable C(bai_session_rdma).
        type: bool
        default: true
      gpu_method:
        description:
          - How NVIDIA GPUs are handed to a container - V(device_request) (any engine >= 19.03
            with the NVIDIA container toolkit) or V(cdi) (CDI device names; Docker >= 25 with
            CDI enabled and the spec that the C(bai.cluster.gpu_runtime) role generates). AMD
            GPUs are always passed as device nodes.
          - Inventory variable C(bai_gpu_method).
        type: str
        choices: [device_request, cdi]
        default: device_request
"""
