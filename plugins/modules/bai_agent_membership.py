#!/usr/bin/python
"""Ansible module bai_agent_membership: an agent's place in the cluster's records."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_agent_membership
short_description: Take an agent out of the cluster's records (its swarm node, the session ledger)
description:
  - Runs where the session ledger is served (a swarm manager, or the file ledger's host),
    as the last step of C(playbooks/agent_remove.yml) (C(bai-cluster agent remove)),
    once the agent's sessions have ended and the agent has left the swarm.
  - O(state=absent) first drops the agent from the session ledger - its kept read, its
    availability record, and its name among the agents a forced destroy left leftovers on
    - in one compare-and-swap. It refuses, changing nothing, while a session holds a
    reservation on the agent, naming the sessions - they are ended first, never stranded
    after. Then, in a swarm, it removes the agent's node entry - once the node is down
    (it left) and within O(wait_timeout) seconds, or at once with O(force) (an agent
    that is powered off or does not answer). A swarm manager is never removed here.
  - O(state=present) changes nothing and returns the agent's node (is it a member, is it
    ready) and its records.
  - A virtual agent (one slot of an engine, C(bai_agent_id)) has no node of its own;
    only its records go.
  - C(playbooks/manager_remove.yml) uses it for a manager it has demoted (a worker then),
    with O(identity) its node ID.
version_added: "1.3.0"
author: bai-cluster developers (@bai-cluster)
options:
  agent:
    description: The agent's inventory name.
    type: str
    required: true
  identity:
    description:
      - The agent's identity (its swarm node ID, C(/SLOT) for a virtual agent).
        Omitted - the identity of the ledger's last read of O(agent), else the swarm
        node whose hostname is O(agent).
    type: str
  state:
    description: V(absent) takes the agent out; V(present) only reads.
    type: str
    choices: [absent, present]
    default: present
  force:
    description:
      - Remove the swarm node with force, without waiting for it to be down (an agent
        that is powered off or cut off, C(bai-cluster agent remove --dead)).
    type: bool
    default: false
  wait_timeout:
    description: Seconds to wait for the node of an agent that left to show down.
    type: int
    default: 60
  lock_timeout:
    description: Seconds to wait for the file ledger's lock.
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    description: Says what would be removed, and changes nothing.
  diff_mode:
    support: none
    description: Returns no diff; RV(dropped) and RV(node) say what went.
  idempotent:
    support: full
    description: A second run finds nothing of the agent and changes nothing.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.ledger_store
  - bai.cluster.docker
"""

EXAMPLES = r"""
- name: Take agent2 out of the swarm's node list and the session ledger
  bai.cluster.bai_agent_membership:
    agent: agent2
    state: absent
    store: swarm
  delegate_to: manager

- name: An agent that is powered off - its node goes with force
  bai.cluster.bai_agent_membership:
    agent: agent3
    state: absent
    force: true
    store: swarm
  delegate_to: manager
"""

RETURN = r"""
identity:
  description: The agent's identity used (empty when neither given nor known).
  returned: always
  type: str
node:
  description:
    - The agent's swarm node (C(id), C(hostname), C(state), C(availability), C(role));
      with O(state=absent), the node that was removed. Null when the swarm has none.
  returned: always
  type: dict
dropped:
  description: What went from the session ledger, in words.
  returned: always
  type: list
  elements: str
records:
  description: O(state=present) - the ledger's kept read of the agent (null if none).
  returned: O(state=present)
  type: dict
"""

import time
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Busy,
    Failure,
    StoreError,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    APIError,
    DockerException,
    error_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.hosts import swarm
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document, roster
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)


def forget(module: AnsibleModule, store: store_.Store) -> dict[str, Any]:
    """The ledger's part: drop the agent (refused while sessions hold it)."""
    params = module.params
    found: dict[str, Any] = {}

    def step(snapshot: store_.Snapshot, now: float) -> dict:
        if snapshot.damaged:
            raise Failure(f"{store.where}: {snapshot.damaged}; {document.REBUILD_HINT}")
        ledger = snapshot.ledger
        identity = params["identity"] or roster.known_identity(ledger, params["agent"])
        kept = (ledger.agents or {}).get(params["agent"])
        found.update(identity=identity, record=kept.to_dict() if kept else None)
        if params["state"] == "present":
            return {"changed": False}
        gone = roster.forget_agent(ledger, params["agent"], identity)
        if gone.holding:
            raise Failure(
                f"agent {params['agent']}: session(s) {', '.join(gone.holding)} hold a "
                f"reservation there; nothing was removed. End them first (bai-cluster agent "
                f"drain NAME --force), or remove an agent that is down with --dead"
            )
        found["dropped"] = gone.dropped
        return {"changed": bool(gone.dropped)}

    done = store_.transact(store, step, write=not module.check_mode)
    return {"changed": done["changed"], **found}


def node_row(node: Mapping[str, Any]) -> dict[str, Any]:
    row = roster.node_table([node])[str(node["ID"])].to_dict()
    row["role"] = (node.get("Spec") or {}).get("Role") or "worker"
    return row


def remove_node(module: AnsibleModule, api: Any, node: Mapping[str, Any]) -> bool:
    """Remove the agent's node: once it is down (it left), or at once with force."""
    params = module.params
    deadline = time.monotonic() + params["wait_timeout"]
    while not params["force"]:
        try:
            node = api.inspect_node(node["ID"])
        except APIError as exc:
            if getattr(exc, "status_code", None) == 404:
                return False  # gone meanwhile
            raise
        if (node.get("Status") or {}).get("State") == "down":
            break
        if time.monotonic() >= deadline:
            raise Failure(
                f"agent {params['agent']}: its swarm node {node['ID']} is still "
                f"{(node.get('Status') or {}).get('State')} after {params['wait_timeout']} s; "
                f"it has not left the swarm. Make it leave (docker swarm leave on it), or "
                f"remove an agent that is down with --dead"
            )
        time.sleep(1)
    if module.check_mode:
        return True
    try:
        api.remove_node(node["ID"], force=params["force"])
    except APIError as exc:
        if getattr(exc, "status_code", None) == 404:
            return False
        raise
    return True


def run(module: AnsibleModule) -> dict[str, Any]:
    params = module.params
    store = store_.open_store(module)
    result = forget(module, store)
    result.setdefault("dropped", [])
    out: dict[str, Any] = {
        "changed": result["changed"],
        "identity": result["identity"],
        "dropped": result["dropped"],
        "node": None,
    }
    if params["state"] == "present":
        out["records"] = result.get("record")
    if not isinstance(store, store_.SwarmStore):
        return out
    node, problem = swarm.node_of_agent(store.api.nodes(), params["agent"], result["identity"])
    if problem:
        raise Failure(f"agent {params['agent']}: {problem}")
    if node is None:
        return out
    out["node"] = node_row(node)
    if params["state"] == "absent" and remove_node(module, store.api, node):
        out["changed"] = True
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "agent": {"type": "str", "required": True},
            "identity": {"type": "str"},
            "state": {"type": "str", "choices": ["absent", "present"], "default": "present"},
            "force": {"type": "bool", "default": False},
            "wait_timeout": {"type": "int", "default": 60},
            "lock_timeout": {"type": "int", "default": 120},
            **store_.STORE_ARGUMENT_SPEC,
            **DOCKER_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except Failure as exc:
        module.fail_json(msg=str(exc))
    except Busy:
        module.fail_json(
            msg=f"the session ledger stayed locked for {module.params['lock_timeout']} s"
        )
    except StoreError as exc:
        module.fail_json(msg=str(exc))
    except (DockerException, OSError) as exc:
        module.fail_json(msg=f"agent {module.params['agent']}: {error_text(exc)}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
