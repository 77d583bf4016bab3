#!/usr/bin/python
"""Ansible module bai_session_plan: validate a session spec."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_plan
short_description: Validate a cluster session spec
description:
  - Pure computation on the controller; talks to nothing and changes nothing.
  - Validates the session variables (docs/sessions.md) and expands the kernels
    (C(main1), C(sub1), ... or the O(roles) given), before any agent is contacted.
  - Placing the session is the session ledger's job (M(bai.cluster.bai_session_ledger),
    docs/placement.md), which takes RV(spec).
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
  type:
    description:
      - C(interactive) (default; the session lives until it is destroyed) or C(batch) (it
        runs O(command) to its end, docs/sessions.md).
    type: raw
  command:
    description:
      - A batch session's command, one shell line, run in main1 as user C(work); required
        for C(batch), refused otherwise.
    type: raw
  owner:
    description:
      - Who holds the session (1 to 64 letters, digits, C(_), C(.), C(@), C(-)); the
        per-owner limits of M(bai.cluster.bai_session_ledger)
        (O(bai.cluster.bai_session_ledger#module:policies)) count it. Kept in RV(spec)
        and the containers' label C(ai.backend.cluster.owner), but not in
        RV(spec_hash) - a rerun by anyone matches the session.
    type: raw
  lifetime_s:
    description:
      - Seconds the session may run, counted from when the ledger placed it (0 or unset -
        no limit of its own; the owner's longest under
        O(bai.cluster.bai_session_ledger#module:policies) then applies). Reconcile ends a
        session whose lifetime is up. Kept in RV(spec), not in RV(spec_hash).
    type: raw
  end_signal:
    description:
      - C(SIG@SECONDS), a warning before the lifetime ends - reconcile sends signal SIG
        (C(USR1), C(TERM), ... as M(bai.cluster.bai_session_signal) does) to every member
        that many seconds (1 to 86400) before it. Kept in RV(spec), not in RV(spec_hash).
    type: raw
  restarts:
    description:
      - How many times a batch session's gang may start again (0 to 100) after an end
        that counts - an agent lost, a drain, a member gone, killed by a signal or for
        memory, or an exit code O(restart_on) names. Kept in RV(spec), not in
        RV(spec_hash).
    type: raw
  restart_on:
    description:
      - Exit codes (1 to 255; a list, or a string C(3,75)) that restart the gang as well.
        Needs O(restarts). Kept in RV(spec), not in RV(spec_hash).
    type: raw
  preemptible:
    description:
      - Whether a queued session of a higher priority (its owner's policy C(priority))
        may stop this batch session, which then queues again through its restarts
        (needs O(restarts)). Kept in RV(spec), not in RV(spec_hash).
    type: raw
  apps:
    description:
      - The session's own apps in main1 (C(session_apps); docs/apps.md), a list of
        C(NAME=http:PORT) (or C(NAME:http:PORT), or mappings with C(name), C(protocol) and
        C(port)). main1 publishes their ports toward the app proxy; the user starts the
        servers. An interactive session's only. Kept in RV(spec) (as C(NAME:http:PORT))
        and in RV(spec_hash) when given.
    type: raw
  topology:
    description:
      - The topology level (one of the inventory's C(bai_topology_levels), e.g. C(rack))
        inside one domain of which every member of the session runs; it waits (PENDING)
        until one domain has room for all of them. Kept in RV(spec), not in
        RV(spec_hash).
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
  topology_prefer_s:
    description:
      - Seconds the session waits in the queue for one domain of O(topology) before it is
        placed by the level above (one level more after each further wait, at last by
        none); 0 (the default) waits however long. Capped at O(topology_max_prefer_s).
        Kept in RV(spec), not in RV(spec_hash).
    type: raw
  topology_max_prefer_s:
    description:
      - The cluster's cap on O(topology_prefer_s) (the inventory's
        C(bai_topology_max_prefer_s)); a longer wait is cut to it.
    type: int
  topology_levels:
    description:
      - The cluster's topology levels (the inventory's C(bai_topology_levels)); when
        given, a O(topology) that is not one of them is refused before anything is
        placed.
    type: list
    elements: str
  authorized_keys:
    description:
      - People's OpenSSH public key lines (C(session_authorized_keys)), checked here so that a
        wrong entry is refused before anything is placed; one key per entry. An entry is
        never echoed whole (a private key pasted by mistake must not reach a log).
    type: list
    elements: raw
attributes:
  check_mode:
    description: Pure computation; runs the same in check mode.
  idempotent:
    description: Never changes anything.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.attributes.read_only
"""

EXAMPLES = r"""
- name: Validate the request before contacting any agent
  bai.cluster.bai_session_plan:
    name: "{{ session_name }}"
    size: "{{ session_size | default(omit) }}"
"""

RETURN = r"""
action:
  description: Always C(validated).
  returned: success
  type: str
  sample: validated
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
  returned: success
  type: list
  elements: str
  sample: [main1, sub1, sub2]
"""

from dataclasses import replace

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.mounts import (
    data_roots,
    source_error,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    SPEC_KEYS,
    expand_kernels,
    normalize_spec,
    spec_canonical,
    spec_hash,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.ssh_keys import (
    public_key_errors,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    check_known,
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
        if params["topology_levels"] is not None:
            check_known(spec.topology, params["topology_levels"])
        cap = params["topology_max_prefer_s"]
        if cap is not None and spec.topology_prefer_s > max(cap, 0):
            spec = replace(spec, topology_prefer_s=max(cap, 0))
    except SpecError as exc:
        module.fail_json(msg=f"invalid session spec: {exc}")
    key_problems = public_key_errors(params["authorized_keys"] or [])
    if key_problems:
        module.fail_json(
            msg="session_authorized_keys must list OpenSSH public key lines (TYPE BASE64 "
            "[COMMENT], e.g. the content of ~/.ssh/id_ed25519.pub), one key per entry: "
            f"{'; '.join(key_problems)}; nothing was changed."
        )
    return {
        "changed": False,
        "action": "validated",
        "requested_mode": spec.mode,
        "spec_hash": spec_hash(spec),
        "spec": spec_canonical(spec),
        "size": spec.size,
        "hosts": [kernel.hostname for kernel in expand_kernels(spec)],
    }


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
    "type": {"type": "raw"},
    "command": {"type": "raw"},
    "owner": {"type": "raw"},
    "lifetime_s": {"type": "raw"},
    "end_signal": {"type": "raw"},
    "restarts": {"type": "raw"},
    "restart_on": {"type": "raw"},
    "preemptible": {"type": "raw"},
    "apps": {"type": "raw"},
    "topology": {"type": "raw"},
    "topology_prefer_s": {"type": "raw"},
    "topology_max_prefer_s": {"type": "int"},
    "topology_levels": {"type": "list", "elements": "str"},
    "spec": {"type": "dict"},
    "data_roots": {"type": "list", "elements": "str"},
    # no_log: a private key pasted by mistake must not reach the invocation in a log.
    "authorized_keys": {"type": "list", "elements": "raw", "no_log": True},
}


def main() -> None:
    # Normally run in the controller's process by plugins/action/bai_session_plan.py;
    # this entry point serves a play that ships the module to a host.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
