#!/usr/bin/python
"""Ansible module bai_agent_availability: pause, drain or activate an agent."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_agent_availability
short_description: Pause, drain or activate a compute agent, or read what is out of service
description:
  - An agent's availability (docs/operations.md) says whether it takes new sessions -
    V(active), V(pause) (no new session is placed or admitted there; sessions there keep
    running and a rerun still repairs them) or V(drain) (paused while its sessions end).
  - It is kept in two places, each written by one run of this module. Pausing writes the
    agent's first, then the cluster's; activating clears them in the same order. So no
    create that is placed while a pause is under way lands on the agent.
  - O(scope=agent) runs on the agent and writes its own record (C(availability.json) in
    O(state_dir), one per slot of its engine) under the engine's admission lock, the lock
    under which M(bai.cluster.bai_session_containers) admits containers and reads this
    record. Returns RV(identity) and the sessions that hold the agent (RV(sessions)).
  - O(scope=cluster) runs where the session ledger is served (a swarm manager, or the
    file ledger's host) and writes the record into the session ledger (in the swarm's
    raft store where there is a swarm, by compare-and-swap), with who (O(by)), why
    (O(reason)) and when (the ledger's clock). For an agent that is its whole engine in a
    swarm, the swarm node's availability is set the same (C(docker node ls) shows it);
    M(bai.cluster.bai_session_ledger) places no session on an agent either says is paused
    or drained.
  - Without O(availability) nothing is changed - O(scope=agent) returns the agent's record
    and sessions, O(scope=cluster) every record (RV(records)), the swarm's nodes
    (RV(nodes)) and what the ledger's reservations give out per agent.
  - Nothing else in this collection changes an agent's availability - re-running site.yml
    or a role never puts a paused agent back in service.
version_added: "1.2.0"
author: bai-cluster developers (@bai-cluster)
options:
  agent:
    description: The agent's inventory name (required with O(availability)).
    type: str
  agent_id:
    description:
      - The inventory's C(bai_agent_id), for a virtual agent (one slot of an engine). Its
        record is its own; in a swarm its node is left alone (other slots share it).
    type: str
  identity:
    description:
      - The agent's identity (RV(identity) of the O(scope=agent) run), for
        O(scope=cluster). Omitted (an agent that does not answer) - the identity of the
        ledger's last read of O(agent), else the swarm node whose hostname is O(agent).
    type: str
  availability:
    description: What to make the agent; omit to read only.
    type: str
    choices: [active, pause, drain]
  scope:
    description: Which record - the agent's own (run on the agent) or the cluster's.
    type: str
    choices: [agent, cluster]
    default: agent
  purpose:
    description:
      - Whose record it is (O(scope=agent)). V(operator) - a pause, drain or activate of
        the operator's. V(removed) - the mark C(agent remove) leaves on an agent it takes
        out of the cluster (with O(availability=drain)). V(setup) - site.yml's hold of an
        agent it is adding - O(availability=pause) holds an agent in no swarm with no
        record, or one marked V(removed), out of service (any other record is kept),
        and O(availability=active) clears that hold only, never an operator's pause.
        V(maintenance) - a drain of C(playbooks/maintenance.yml), which a rerun recognizes
        as its own.
    type: str
    choices: [operator, setup, removed, maintenance]
    default: operator
  reason:
    description: Why (shown by C(bai-cluster agent list) and in PENDING messages).
    type: str
    default: ""
  by:
    description: Who (the operator; the CLI passes the user that runs it).
    type: str
    default: ""
  state_dir:
    description: Folder of the agent's own record (O(scope=agent)); made 0700.
    type: path
    default: /var/lib/bai-cluster
  lock_dir:
    description: Folder of the engine's admission lock (O(scope=agent)).
    type: path
    default: /run/bai-cluster
  lock_timeout:
    description: Seconds to wait for the admission lock, or the file ledger's lock.
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    description: Reports whether a record would change, and changes nothing.
  diff_mode:
    support: none
    description: Returns no diff; RV(previous) and RV(record) say what changed.
  idempotent:
    support: full
    description:
      - Pausing a paused agent keeps its first record (who and when) and reports no
        change; activating an active one changes nothing.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.ledger_store
  - bai.cluster.docker
"""

EXAMPLES = r"""
- name: Pause agent1 on the agent itself (its admission refuses new sessions)
  bai.cluster.bai_agent_availability:
    agent: agent1
    availability: pause
    reason: driver upgrade
    by: alice
  delegate_to: agent1
  register: own

- name: Record the pause in the cluster (placement passes over agent1)
  bai.cluster.bai_agent_availability:
    agent: agent1
    identity: "{{ own.identity }}"
    availability: pause
    reason: driver upgrade
    by: alice
    scope: cluster
    store: swarm
  delegate_to: manager
"""

RETURN = r"""
identity:
  description:
    - The agent's identity (its swarm node ID, else its engine ID; C(/SLOT) for a
      virtual agent).
  returned: when O(agent) is given and known
  type: str
record:
  description:
    - The agent's record now (C(availability), C(name), C(id), C(by), C(reason), C(at));
      null when it is active.
  returned: when O(agent) is given
  type: dict
previous:
  description: The record before this run; null when the agent was active.
  returned: when O(agent) is given
  type: dict
sessions:
  description:
    - O(scope=agent) - the sessions with containers (any state) on this agent
      (C(name), C(session_id), C(containers), C(states)); a drain waits until none is left.
  returned: O(scope=agent)
  type: list
  elements: dict
node:
  description:
    - O(scope=cluster) in a swarm - the agent's node (C(id), C(availability) now,
      C(state)); null when the agent has no node of its own.
  returned: O(scope=cluster) with O(agent)
  type: dict
records:
  description: O(scope=cluster) - every agent the ledger holds out of service, by identity.
  returned: O(scope=cluster)
  type: dict
nodes:
  description:
    - O(scope=cluster) read only, in a swarm - its nodes by node ID (C(hostname),
      C(state), C(availability), C(usable), C(cpu), C(mem)).
  returned: O(scope=cluster) without O(availability)
  type: dict
given_out:
  description:
    - O(scope=cluster) read only - per agent (inventory name), what the ledger's
      reservations give out (C(cpu), C(mem), C(gpu_devices)) and which sessions
      (C(sessions)).
  returned: O(scope=cluster) without O(availability)
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Busy
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    connect,
    error_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    availability as avail,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.availability import (
    in_cluster,
    on_agent,
)

ARGUMENT_SPEC = {
    "agent": {"type": "str"},
    "agent_id": {"type": "str"},
    "identity": {"type": "str"},
    "availability": {"type": "str", "choices": list(avail.AVAILABILITIES)},
    "scope": {"type": "str", "choices": ["agent", "cluster"], "default": "agent"},
    "purpose": {"type": "str", "choices": list(avail.PURPOSES), "default": "operator"},
    "reason": {"type": "str", "default": ""},
    "by": {"type": "str", "default": ""},
    "state_dir": {"type": "path", "default": "/var/lib/bai-cluster"},
    "lock_dir": {"type": "path", "default": "/run/bai-cluster"},
    "lock_timeout": {"type": "int", "default": 120},
    **store_.STORE_ARGUMENT_SPEC,
    **DOCKER_ARGUMENT_SPEC,
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[
            ("availability", "active", ("agent",)),
            ("availability", "pause", ("agent",)),
            ("availability", "drain", ("agent",)),
        ],
        supports_check_mode=True,
    )
    try:
        if module.params["scope"] == "agent":
            result = on_agent(module, connect(module).api)
        else:
            result = in_cluster(module)
    except Busy:
        module.fail_json(
            msg=f"agent {module.params['agent']}: the admission lock of its engine stayed "
            f"taken for {module.params['lock_timeout']} s"
        )
    except ValueError as exc:
        module.fail_json(msg=f"agent {module.params['agent']}: {exc}")
    except (DockerException, OSError) as exc:
        module.fail_json(msg=f"agent {module.params['agent']}: {error_text(exc)}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
