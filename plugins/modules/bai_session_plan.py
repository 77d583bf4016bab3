#!/usr/bin/python
"""Ansible module bai_session_plan: validate a session spec and place its containers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_plan
short_description: Validate a cluster session spec and decide where its containers go
description:
  - Pure computation on the controller; talks to nothing and changes nothing.
  - Validates the session variables (docs/sessions.md) and expands the kernels
    (C(main1), C(sub1), ... or the O(roles) given).
  - Without O(agents) and O(agent_info) it only validates (RV(action) C(validated)).
  - With them it places the session (docs/placement.md). If containers of this session name
    already exist with the same spec, the result is RV(action) C(exists) and ids and
    placement are read back from their labels; with another spec it fails and says so.
  - A session that does not fit now fails with a message containing C(PENDING) and the
    reason; RV(pending) and RV(permanent) tell a retry loop whether waiting can help.
  - GPUs (C(resources.gpu) per container) are counted per agent from its free GPU
    devices; each container is then given its own device indices on its agent
    (RV(kernels[].gpu_devices), also in the container label
    C(ai.backend.cluster.gpu-devices)), never a device another container holds or gets.
  - Errors in the spec fail with a message naming the field, the value given and what
    is allowed.
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  name:
    description:
      - Session name (1-32 of C(a-z0-9-)); required (its absence is reported like any spec
        error).
    type: raw
  size:
    description: Number of containers (1-64); may be omitted when O(roles) is given.
    type: raw
  mode:
    description: C(single-node) (default) or C(multi-node).
    type: raw
  image:
    description:
      - Image of every container unless a role says otherwise (default C(bai/session:latest)).
    type: raw
  resource_group:
    description: Resource group whose agents may run the session (default C(default)).
    type: raw
  env:
    description: Extra environment variables (string values) for every container.
    type: raw
  resources:
    description: Per-container C(cpu), C(mem), C(gpu) (default 1 CPU, 1g, 0 GPUs).
    type: raw
  mounts:
    description: Host folders (C(src), C(dst), optional C(readonly)) mounted into every container.
    type: raw
  roles:
    description:
      - Heterogeneous roles in order, each C(role), C(replicas), optional C(image),
        C(resources).
    type: raw
  spec:
    description:
      - A spec in canonical form (RV(spec) of an earlier call), instead of the separate
        options above; it validates to the very same session.
    type: dict
  data_roots:
    description:
      - The data roots of the agents (their C(bai_data_roots)); when given, each mount
        source must lie under one of them, else the request is refused before any agent is
        contacted. The agent checks again, after resolving symbolic links
        (M(bai.cluster.bai_session_containers)).
    type: list
    elements: str
  agents:
    description:
      - Candidate agents, each C(name), C(group), C(cpu), C(mem), C(gpu) and optional
        C(used_cpu), C(used_mem), C(used_gpu), C(images) (ref -> present), C(paths) (path ->
        exists), C(gpu_devices) (offered GPU device indices; default C(0..gpu-1)) and
        C(gpu_in_use) (indices session containers hold), as M(bai.cluster.bai_agent_info)
        returns them.
    type: list
    elements: dict
  existing:
    description:
      - Containers of this session name found on the agents (C(agent), C(name), C(state),
        C(image), C(labels)).
    type: list
    elements: dict
    default: []
  agent_info:
    description:
      - The registered C(results) of a looped M(bai.cluster.bai_agent_info) task; fills
        O(agents) and O(existing) (added to whatever those already hold).
    type: list
    elements: dict
attributes:
  check_mode:
    support: full
    description: Pure computation; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is no diff to show.
  idempotent:
    support: full
    description: Never changes anything (fresh kernel ids are drawn for a new session only).
"""

EXAMPLES = r"""
- name: Validate the request before contacting any agent
  bai.cluster.bai_session_plan:
    name: "{{ session_name }}"
    size: "{{ session_size | default(omit) }}"

- name: Place the session on the agents
  bai.cluster.bai_session_plan:
    name: "{{ session_name }}"
    size: "{{ session_size | default(omit) }}"
    mode: "{{ session_mode | default(omit) }}"
    agent_info: "{{ info.results }}"
  register: plan
"""

RETURN = r"""
action:
  description:
    - C(validated) (no agents given), C(create) (new session) or C(exists) (already there, same
      spec).
  returned: success
  type: str
  sample: create
ready:
  description: True when the session exists with this spec and every container runs (nothing to do).
  returned: when O(agents) or O(agent_info) was given
  type: bool
ssh_port:
  description: Host port of the master's published sshd when the session exists already, else null.
  returned: when O(agents) or O(agent_info) was given
  type: int
session_id:
  description: The session UUID (main1's kernel id); absent for C(validated).
  returned: when O(agents) or O(agent_info) was given
  type: str
mode:
  description: The mode as placed (C(multi-node) only when the containers really are spread).
  returned: when O(agents) or O(agent_info) was given
  type: str
  sample: single-node
requested_mode:
  description: The mode asked for.
  returned: success
  type: str
spec_hash:
  description: Hash of the canonical spec (the C(ai.backend.cluster.spec-hash) label).
  returned: success
  type: str
spec:
  description: The validated spec in canonical form (env sorted, mounts normalised).
  returned: success
  type: dict
size:
  description: Number of containers.
  returned: success
  type: int
hosts:
  description: The containers' hostnames in kernel order (C(main1), C(sub1), ...).
  returned: when neither O(agents) nor O(agent_info) was given (RV(action) C(validated))
  type: list
  elements: str
  sample: [main1, sub1, sub2]
network:
  description:
    - The session network (C(name), C(driver) bridge or overlay, C(labels)).
  returned: when O(agents) or O(agent_info) was given
  type: dict
agents:
  description: Agents used, in order of first use (main1's agent first).
  returned: when O(agents) or O(agent_info) was given
  type: list
  elements: str
kernels:
  description: One entry per container, in kernel order.
  returned: when O(agents) or O(agent_info) was given
  type: list
  elements: dict
  contains:
    hostname:
      description: The container's hostname (C(main1), C(sub1), ...).
      type: str
    role:
      description: The container's role (C(main), C(sub) or a role of O(roles)).
      type: str
    idx:
      description: Position of the container within its role, from 1 (the 1 of C(sub1)).
      type: int
    rank:
      description: The container's rank in the session (0 for C(main1), the master).
      type: int
    agent:
      description: The agent the container is placed on.
      type: str
    kernel_id:
      description: The container's kernel id (main1's is the session id).
      type: str
    container_name:
      description: The Docker container name.
      type: str
    image:
      description: The container's image.
      type: str
    resources:
      description: What the container is given - C(cpu), C(mem) (bytes), C(gpu) (count).
      type: dict
    gpu_devices:
      description: Its agent's GPU device indices the container is given (C([]) for none).
      type: list
      elements: int
    labels:
      description: The container's labels.
      type: dict
summary:
  description: What the create play reports (name, session_id, mode, network, containers).
  returned: when O(agents) or O(agent_info) was given
  type: dict
pending:
  description: True when the failure is a PENDING placement.
  returned: failure
  type: bool
permanent:
  description: True when waiting cannot help a PENDING placement.
  returned: failure
  type: bool
conflict:
  description: True when the name is taken by a different or incomplete session.
  returned: failure
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.errors import (
    Pending,
    SessionConflict,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.mounts import data_roots, source_error
from ansible_collections.bai.cluster.plugins.module_utils.plan import agents_from_info, plan_session
from ansible_collections.bai.cluster.plugins.module_utils.spec import (
    SPEC_KEYS,
    expand_kernels,
    normalize_spec,
    spec_canonical,
    spec_hash,
)


def run(module: AnsibleModule) -> dict:
    params = module.params
    raw = {key: params[key] for key in SPEC_KEYS}
    if params["spec"] is not None:
        given = sorted(key for key, value in raw.items() if value is not None)
        if given:
            module.fail_json(
                msg=f"bai_session_plan: give either spec or {', '.join(given)}, not both"
            )
        raw = dict(params["spec"])
    try:
        spec = normalize_spec(raw)
        if params["data_roots"] is not None:
            roots = data_roots(params["data_roots"])
            problems = [
                source_error(mount.src, roots, f"mounts[{i}].src")
                for i, mount in enumerate(spec.mounts)
            ]
            if any(problems):
                raise SpecError("; ".join(p for p in problems if p))
    except SpecError as exc:
        module.fail_json(msg=f"invalid session spec: {exc}")
    common = {
        "changed": False,
        "requested_mode": spec.mode,
        "spec_hash": spec_hash(spec),
        "spec": spec_canonical(spec),
        "size": spec.size,
    }
    try:
        agents, existing, inventory = agents_from_info(
            params["agents"], params["existing"], params["agent_info"]
        )
    except SpecError as exc:
        module.fail_json(msg=f"bai_session_plan: {exc}")
    if agents is None:
        hosts = [kernel.hostname for kernel in expand_kernels(spec)]
        return {**common, "action": "validated", "hosts": hosts}
    try:
        plan = plan_session(spec, agents, existing, inventory=inventory)
    except Pending as exc:
        module.fail_json(msg=f"session {spec.name}: {exc}", pending=True, permanent=exc.permanent)
    except SessionConflict as exc:
        module.fail_json(msg=str(exc), conflict=True)
    except SpecError as exc:
        module.fail_json(msg=f"session {spec.name}: {exc}; nothing was created")
    return {**common, **plan}


ARGUMENT_SPEC = {
    "name": {"type": "raw"},
    "size": {"type": "raw"},
    "mode": {"type": "raw"},
    "image": {"type": "raw"},
    "resource_group": {"type": "raw"},
    "env": {"type": "raw"},
    "resources": {"type": "raw"},
    "mounts": {"type": "raw"},
    "roles": {"type": "raw"},
    "spec": {"type": "dict"},
    "data_roots": {"type": "list", "elements": "str"},
    "agents": {"type": "list", "elements": "dict"},
    "existing": {"type": "list", "elements": "dict", "default": []},
    "agent_info": {"type": "list", "elements": "dict"},
}


def main() -> None:
    # Normally run in the controller's process by plugins/action/bai_session_plan.py;
    # this entry point serves a play that ships the module to a host.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
