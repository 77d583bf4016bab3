#!/usr/bin/python
"""Ansible module bai_agent_info: capacity, use and session containers of one agent."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_agent_info
short_description: Read an agent's capacity, what sessions use of it, and session containers
description:
  - Runs on a compute agent (usually with C(delegate_to)) and reads its Docker engine.
  - Capacity is O(resources) where given (the inventory's C(bai_agent_resources)), else
    what the engine reports (C(docker info) NCPU and MemTotal).
  - GPUs are detected on the agent (the same detection as M(bai.cluster.bai_gpu_facts)).
    B(Detected devices win) whenever there are any; their indices are offered, whatever
    the C(gpu) key of O(resources) says (a different count gets a warning). Where none is
    detected, a C(gpu) count C(K) in O(resources) is offered as anonymous devices
    C(0..K-1); placement counts them (simulated capacity, e.g. for tests), but
    M(bai.cluster.bai_session_containers) refuses to create a container given one, since
    there is no device to hand over.
  - Use is the sum of the resource labels of the B(running) session containers, so no
    state file is needed (Docker is the source of truth). GPU devices in use are those
    in the C(ai.backend.cluster.gpu-devices) label of every session container that is
    running, paused, restarting or just created (a device is never given twice).
  - Returns the containers of session O(name), or of every session when O(name) is
    omitted (what C(playbooks/session_list.yml) shows).
  - Optionally reports which O(images) are present (with their C(ENV)) and which
    O(paths) exist, so a plan can fail before anything is created.
  - Read-only; never reports a change.
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  name:
    description: Session name whose containers to return; omit for every session.
    type: str
  agent_name:
    description:
      - The agent's inventory name, copied into the results (C(agent.name), each container's
        C(agent)).
    type: str
    default: localhost
  resource_group:
    description:
      - The agent's resource group (inventory C(bai_resource_group)), copied into
        C(agent.group).
    type: str
    default: default
  resources:
    description:
      - Capacity offered to sessions, overriding what the engine reports; any of
        C(cpu) (number), C(mem) (bytes or a size such as C(32g)), C(gpu) (count).
    type: dict
  images:
    description: Image references to look up on this agent.
    type: list
    elements: str
    default: []
  paths:
    description: Host paths (mount sources) to test for existence on this agent.
    type: list
    elements: str
    default: []
  gpu_detect:
    description:
      - Detect the agent's GPUs. V(false) offers only the C(gpu) count of O(resources)
        (anonymous devices).
    type: bool
    default: true
  gpu_detect_timeout:
    description: Seconds each GPU detection command (C(nvidia-smi), C(rocm-smi)) may run.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is no diff to show.
  idempotent:
    support: full
    description: Never changes anything.
extends_documentation_fragment:
  - bai.cluster.docker
requirements:
  - docker SDK for Python 5.0 or later (Debian python3-docker works)
"""

EXAMPLES = r"""
- name: Read agent capacity and the containers of session train
  bai.cluster.bai_agent_info:
    name: train
    agent_name: "{{ item }}"
    resource_group: "{{ hostvars[item].bai_resource_group | default('default') }}"
    resources: "{{ hostvars[item].bai_agent_resources | default(omit) }}"
    images: [bai/session:latest]
  delegate_to: "{{ item }}"
  loop: "{{ groups['agents'] }}"
  register: info
"""

RETURN = r"""
agent:
  description: Capacity and use, in the form O(bai.cluster.bai_session_plan#module:agents) takes.
  returned: success
  type: dict
  sample: {name: agent1, group: default, cpu: 4.0, mem: 8589934592, gpu: 2,
           used_cpu: 2.0, used_mem: 2147483648, used_gpu: 1, gpu_devices: [0, 1],
           gpu_in_use: [1], gpu_vendor: nvidia, gpu_source: detected}
  contains:
    name:
      description: The agent's inventory name (O(agent_name)).
      type: str
    group:
      description: The agent's resource group (O(resource_group)).
      type: str
    cpu:
      description: CPUs offered to sessions (O(resources) C(cpu), else the engine's NCPU).
      type: float
    mem:
      description:
        - Memory offered to sessions, bytes (O(resources) C(mem), else the engine's MemTotal).
      type: int
    used_cpu:
      description: CPUs that the running session containers were given.
      type: float
    used_mem:
      description: Memory that the running session containers were given, bytes.
      type: int
    used_gpu:
      description: GPUs that the running session containers were given.
      type: int
    gpu:
      description: Number of GPU devices offered (the length of RV(agent.gpu_devices)).
      type: int
    gpu_devices:
      description:
        - GPU device indices offered to sessions (nvidia-smi's indices; AMD render-node order).
      type: list
      elements: int
    gpu_in_use:
      description: Offered device indices that session containers hold.
      type: list
      elements: int
    gpu_vendor:
      description: C(nvidia), C(amd), or C(none) (nothing detected).
      type: str
    gpu_source:
      description:
        - C(detected), C(declared) (the C(gpu) count of O(resources), nothing detected) or
          C(none).
      type: str
    rdma_devices:
      description:
        - The agent's RDMA device nodes under C(/dev/infiniband) (C(uverbs0), C(rdma_cm),
          ...), given to session containers unless turned off; empty when it has none.
      type: list
      elements: str
sessions:
  description:
    - Per session id on this engine, what its running containers were given (C(cpu),
      C(mem), C(gpu)), the GPU devices its containers hold (C(gpu_devices)) and how many
      containers it has in any state (C(containers)); M(bai.cluster.bai_session_ledger)
      counts reserved sessions with it.
  returned: success
  type: dict
  sample: {"0b5c...": {cpu: 2.0, mem: 1073741824, gpu: 0, gpu_devices: [], containers: 2}}
read_at:
  description: When the engine was read (seconds since the epoch, this agent's clock).
  returned: success
  type: float
containers:
  description: Session containers (of O(name), or all), any state, sorted by name.
  returned: success
  type: list
  elements: dict
  sample: [{id: 0123456789ab, name: bai-train-main1, state: running, status: Up 5 minutes,
            image: "bai/session:latest", agent: agent1, labels: {}, ports: []}]
images:
  description: For each of O(images), whether it is present and its ENV list.
  returned: success
  type: dict
  sample: {"bai/session:latest": {present: true, env: ["PATH=/usr/bin:/bin"]}}
paths:
  description: For each of O(paths), whether it exists on this agent.
  returned: success
  type: dict
  sample: {/srv/bai-data: true}
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.docker_api import (
    DOCKER_ARGUMENT_SPEC,
    DockerException,
    connect,
    container_row,
    error_text,
    image_env,
)
from ansible_collections.bai.cluster.plugins.module_utils.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.gpu import (
    LABEL_GPU_DEVICES,
    GpuError,
    HostProbe,
    detect,
    devices_in_use,
    holding_labels,
    offered_gpus,
)
from ansible_collections.bai.cluster.plugins.module_utils.labels import LABEL_AGENT, LABEL_SESSION
from ansible_collections.bai.cluster.plugins.module_utils.ledger import observed_sessions
from ansible_collections.bai.cluster.plugins.module_utils.placement import (
    agent_capacity,
    used_from_labels,
)
from ansible_collections.bai.cluster.plugins.module_utils.rdma import rdma_devices


def gpu_capacity(module: AnsibleModule, listed: list, declared: int | None) -> dict:
    """The agent's GPU devices (detected, else declared) and which of them the session
    containers ``listed`` (this agent's, any state) hold."""
    facts = (
        detect(HostProbe(module.params["gpu_detect_timeout"], module=module))
        if module.params["gpu_detect"]
        else {}
    )
    try:
        offer = offered_gpus(facts, declared)
    except GpuError as exc:
        raise SpecError(f"bai_agent_resources.gpu: {exc}") from None
    if offer["warning"]:
        module.warn(f"agent {module.params['agent_name']}: {offer['warning']}")
    holders = [item for item in listed if LABEL_GPU_DEVICES in (item.get("Labels") or {})]
    held = devices_in_use(holding_labels(holders))
    return {
        "gpu_devices": offer["devices"],
        "gpu_in_use": sorted(held & set(offer["devices"])),
        "gpu_vendor": offer["vendor"],
        "gpu_source": offer["source"],
    }


def run(module: AnsibleModule) -> dict:
    params = module.params
    docker_ = connect(module)
    api = docker_.api
    info = api.info()
    capacity = agent_capacity(
        params["resources"], ncpu=info.get("NCPU") or 0, mem_total=info.get("MemTotal") or 0
    )
    read_at = time.time()
    listed = [
        item
        for item in api.containers(all=True, filters={"label": [LABEL_SESSION]})
        if on_this_agent(item, params["agent_name"])
    ]
    running = [item for item in listed if str(item.get("State") or "").lower() == "running"]
    used = used_from_labels(item.get("Labels") or {} for item in running)
    agent = params["agent_name"]
    gpus = gpu_capacity(
        module, listed, capacity.gpu if _declares_gpu(params["resources"]) else None
    )
    images = {}
    for ref in dict.fromkeys(params["images"]):
        env = image_env(api, ref)
        images[ref] = {"present": env is not None, "env": env or []}
    return {
        "changed": False,
        "agent": {
            "name": agent,
            "group": params["resource_group"],
            "cpu": capacity.cpu,
            "mem": capacity.mem,
            "gpu": len(gpus["gpu_devices"]),
            "used_cpu": used.cpu,
            "used_mem": used.mem,
            "used_gpu": used.gpu,
            **gpus,
            # Shared by every session container of this agent (not counted).
            "rdma_devices": rdma_devices(),
        },
        # Per session id, for the reservation ledger (module_utils/ledger.py).
        "sessions": observed_sessions(listed),
        "read_at": read_at,
        # One list of the engine's session containers serves use, GPUs and this.
        "containers": sorted(
            (
                container_row(item, agent)
                for item in listed
                if params["name"] is None
                or (item.get("Labels") or {}).get(LABEL_SESSION) == params["name"]
            ),
            key=lambda row: row["name"],
        ),
        "images": images,
        "paths": {path: os.path.exists(path) for path in dict.fromkeys(params["paths"])},
    }


def on_this_agent(item: dict, agent: str) -> bool:
    """A container placed on this agent (its LABEL_AGENT), or one without that label
    (made before it existed): agents that share an engine count only their own."""
    placed = (item.get("Labels") or {}).get(LABEL_AGENT)
    return placed is None or placed == agent


def _declares_gpu(resources: dict | None) -> bool:
    return bool(resources) and resources.get("gpu") is not None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str"},
            "agent_name": {"type": "str", "default": "localhost"},
            "resource_group": {"type": "str", "default": "default"},
            "resources": {"type": "dict"},
            "images": {"type": "list", "elements": "str", "default": []},
            "paths": {"type": "list", "elements": "str", "default": []},
            "gpu_detect": {"type": "bool", "default": True},
            "gpu_detect_timeout": {"type": "int", "default": 30},
            **DOCKER_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except SpecError as exc:
        module.fail_json(msg=f"agent {module.params['agent_name']}: {exc}")
    except DockerException as exc:
        module.fail_json(
            msg=f"agent {module.params['agent_name']}: Docker error: {error_text(exc)}"
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
