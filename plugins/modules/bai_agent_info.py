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
  - Use is the sum of the resource labels of B(every) session container of this agent,
    in any state (running, paused, restarting, created or stopped), so no state file is
    needed (Docker is the source of truth); a session holds what it was given until it is
    destroyed, as the agent's admission counts it (docs/placement.md). GPU devices in use
    are those in the C(ai.backend.cluster.gpu-devices) label of the same containers.
  - This agent is its engine (RV(agent.id) - the Swarm node ID, else the engine ID), or
    one slot of it when O(agent_id) is given (virtual agents); its use counts the
    containers labelled with that slot, whatever inventory name placed them.
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
  agent_id:
    description:
      - The inventory's C(bai_agent_id), for virtual agents (several inventory agents on
        one engine on purpose, each with its own offer). Omit for an agent that is its
        whole engine.
    type: str
  read_after:
    description:
      - A time known to precede this read by the session ledger's clock (its
        C(ledger_time)), returned unchanged as RV(read_after) so that the ledger orders
        this read by its own clock, never by this agent's.
    type: float
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
  state_dir:
    description:
      - Folder (on this agent) of its own availability record
        (M(bai.cluster.bai_agent_availability)), returned as RV(agent.availability).
    type: path
    default: /var/lib/bai-cluster
  host_addresses:
    description:
      - Also return this agent's IPv4 addresses (RV(host_addresses)), for the app proxy's
        route to main1 when a rerun reads the agent instead of making containers there.
    type: bool
    default: false
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.attributes.read_only
  - bai.cluster.docker
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
host_addresses:
  description: As RV(bai.cluster.bai_session_containers#module:host_addresses) - C(ip) lines.
  returned: O(host_addresses) and C(ip) answered
  type: list
  elements: str
bad_input:
  description:
    - On failure, true when the agent's declaration is wrong (O(resources), O(agent_id)),
      as against an engine that does not answer; the session playbooks fail a create on
      it, and pass over an agent that does not answer.
  returned: failure
  type: bool
agent:
  description: Capacity and use, in the form O(bai.cluster.bai_session_plan#module:agents) takes.
  returned: success
  type: dict
  sample: {name: agent1, id: 6mk2x0q1bz8y4fj3c7u5n9w2e, group: default, cpu: 4.0,
           mem: 8589934592, gpu: 2,
           used_cpu: 2.0, used_mem: 2147483648, used_gpu: 1, gpu_devices: [0, 1],
           gpu_in_use: [1], gpu_vendor: nvidia, gpu_source: detected}
  contains:
    name:
      description: The agent's inventory name (O(agent_name)).
      type: str
    id:
      description:
        - The agent's identity from the cluster - its engine's Swarm node ID, else the
          engine ID, with C(/)O(agent_id) for a virtual agent.
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
      description: CPUs that the session containers (any state) were given.
      type: float
    used_mem:
      description: Memory that the session containers (any state) were given, bytes.
      type: int
    used_gpu:
      description: GPUs that the session containers (any state) were given.
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
    availability:
      description:
        - The agent's own availability record (C(availability) C(pause) or C(drain),
          C(by), C(reason), C(at)); null when it is active. Placement passes over an
          agent whose read has one.
      type: dict
    isolation:
      description:
        - Whether the nftables table C(inet bai_isolation) that keeps session networks
          apart is loaded here (C(loaded)), its comment (C(marker)), and why not
          (C(problem)); M(bai.cluster.bai_session_containers) starts no container without it.
      type: dict
sessions:
  description:
    - Per session id on this agent, what its containers (any state) were given (C(cpu),
      C(mem), C(gpu)), the GPU devices they hold (C(gpu_devices)) and how many
      containers it has (C(containers)); M(bai.cluster.bai_session_ledger)
      counts reserved sessions with it.
  returned: success
  type: dict
  sample: {"0b5c...": {cpu: 2.0, mem: 1073741824, gpu: 0, gpu_devices: [], containers: 2}}
read_at:
  description: When the engine was read (seconds since the epoch, this agent's clock).
  returned: success
  type: float
read_after:
  description: O(read_after), unchanged (null when not given).
  returned: success
  type: float
containers:
  description:
    - Session containers (of O(name), or all) that this inventory name placed, any state,
      sorted by name.
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

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import (
    with_host_addresses,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import GpuError, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT,
    LABEL_SESSION,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import ContainerRow
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    connect,
    error_text,
    image_env,
    session_rows,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module, says
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import devices_in_use
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import detect
from ansible_collections.bai.cluster.plugins.module_utils.gpu.probe import HostProbe
from ansible_collections.bai.cluster.plugins.module_utils.network import isolation
from ansible_collections.bai.cluster.plugins.module_utils.network.rdma import rdma_devices
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import availability
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    agent_identity,
    engine_identity,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    used_from_labels,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.usage import (
    observed_sessions,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.admission import (
    of_slot,
    offer_of,
)


def _read(module: AnsibleModule) -> dict:
    params = module.params
    api = connect(module).api
    info = api.info()
    facts = (
        detect(HostProbe(params["gpu_detect_timeout"], module=module))
        if params["gpu_detect"]
        else {}
    )
    try:
        offer, gpus = offer_of(params["resources"], info, facts)
        identity = agent_identity(engine_identity(info), params["agent_id"])
    except GpuError as exc:
        raise SpecError(f"bai_agent_resources.gpu: {exc}") from None
    except ValueError as exc:  # SpecError is one
        raise SpecError(str(exc)) from None
    try:
        own = availability.read_marker(params["state_dir"]).get(params["agent_id"] or "")
    except (OSError, ValueError) as exc:
        raise SpecError(f"its availability record: {exc}") from None
    if gpus["warning"]:
        module.warn(f"agent {params['agent_name']}: {gpus['warning']}")
    read_at = time.time()
    # What this agent holds: every session container of its slot of the engine, in any
    # state (a session holds its share until it is destroyed; admission counts the same).
    listed = of_slot(
        session_rows(api),
        params["agent_id"] or "",
    )
    used = used_from_labels(row.labels for row in listed)
    held = devices_in_use(row.labels for row in listed)
    agent = params["agent_name"]
    images = {}
    for ref in dict.fromkeys(params["images"]):
        env = image_env(api, ref)
        images[ref] = {"present": env is not None, "env": env or []}
    return {
        "changed": False,
        "agent": {
            "name": agent,
            "id": identity,
            "group": params["resource_group"],
            "cpu": offer.cpu,
            "mem": offer.mem,
            "gpu": len(offer.gpu_devices),
            "used_cpu": used.cpu,
            "used_mem": used.mem,
            "used_gpu": used.gpu,
            "gpu_devices": list(offer.gpu_devices),
            "gpu_in_use": sorted(held & set(offer.gpu_devices)),
            "gpu_vendor": gpus["vendor"],
            "gpu_source": gpus["source"],
            # Shared by every session container of this agent (not counted).
            "rdma_devices": rdma_devices(),
            # Its own availability record (bai_agent_availability): None when active.
            "availability": own.to_dict() if own is not None else None,
            # Whether table inet bai_isolation keeps its sessions apart (roles/session_isolation).
            "isolation": isolation.table_state(module),
        },
        # Per session id, for the reservation ledger (module_utils/scheduling/ledger/usage.py).
        "sessions": observed_sessions(listed),
        "read_at": read_at,
        "read_after": params["read_after"],
        # The containers this inventory name placed (one list of the engine serves all).
        "containers": [
            row.at(agent).to_dict()
            for row in sorted(listed, key=lambda row: row.name)
            if on_this_agent(row, agent)
            and (params["name"] is None or row.label(LABEL_SESSION) == params["name"])
        ],
        "images": images,
        "paths": {path: os.path.exists(path) for path in dict.fromkeys(params["paths"])},
    }


def on_this_agent(row: ContainerRow, agent: str) -> bool:
    """A container placed by this inventory name (its LABEL_AGENT), or one without that
    label (made before it existed)."""
    placed = row.label(LABEL_AGENT)
    return placed is None or placed == agent


ARGUMENT_SPEC = {
    "name": {"type": "str"},
    "agent_name": {"type": "str", "default": "localhost"},
    "agent_id": {"type": "str"},
    "read_after": {"type": "float"},
    "resource_group": {"type": "str", "default": "default"},
    "resources": {"type": "dict"},
    "images": {"type": "list", "elements": "str", "default": []},
    "paths": {"type": "list", "elements": "str", "default": []},
    "gpu_detect": {"type": "bool", "default": True},
    "gpu_detect_timeout": {"type": "int", "default": 30},
    "state_dir": {"type": "path", "default": "/var/lib/bai-cluster"},
    "host_addresses": {"type": "bool", "default": False},
    **DOCKER_ARGUMENT_SPEC,
}


def run(module: AnsibleModule) -> None:
    """Read this agent and exit with the result (fail_json with what went wrong)."""
    agent = module.params["agent_name"]
    run_module(
        module,
        lambda: with_host_addresses(
            _read(module), module.run_command, module.params["host_addresses"]
        ),
        # Its declaration is wrong (not an agent that does not answer): said as such.
        (SpecError, says(f"agent {agent}: ", bad_input=True)),
        (DockerException, says(f"agent {agent}: Docker error: ", error_text)),
    )


def main() -> None:
    # Normally run in the controller's process when the agent is the controller itself
    # (plugins/action/bai_agent_info.py); shipped to the agent anywhere else.
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
