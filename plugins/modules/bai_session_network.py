#!/usr/bin/python
"""Ansible module bai_session_network: a cluster session's private network."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_network
short_description: Create or remove a cluster session's network
description:
  - O(state=present) creates the session network, labelled with the session's labels
    (docs/sessions.md). A C(bridge) network gets a subnet from O(subnet_pool), skipping every
    subnet the engine's networks already use (Docker's default address pools run out
    near 30 bridge networks; this pool holds thousands), and retries with the next one
    when a concurrent create took it first.
  - An C(overlay) network (multi-node sessions) is attachable and must be created on a
    Docker Swarm manager; Swarm allocates its subnet.
  - If the network already exists for the same session id nothing changes. A leftover of
    an earlier attempt of the same session name with no containers attached is replaced.
  - O(state=absent) removes every network labelled with session O(session) on this engine
    (and the network called O(name) if it carries that label); removing nothing is not
    an error.
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  name:
    description: Network name; default C(bai-<session>-net).
    type: str
  labels:
    description:
      - Labels of the network (bai_session_plan's C(network.labels)); the session labels are
        always set.
    type: dict
    default: {}
  driver:
    description: C(bridge) (all containers on one agent) or C(overlay) (spread across agents).
    type: str
    choices: [bridge, overlay]
    default: bridge
  subnet_pool:
    description: Address pool for bridge subnets (IPv4 CIDR).
    type: str
    default: 10.224.0.0/12
  subnet_prefix:
    description: Prefix length of each session's bridge subnet.
    type: int
    default: 24
  mtu:
    description:
      - MTU of the containers' interfaces on the network; default is the engine's.
      - A bridge gets it as its C(com.docker.network.driver.mtu) option. Docker's overlay
        driver takes 50 bytes for the VXLAN header off that option, so an overlay gets
        O(mtu) + 50 there and its containers' interfaces get O(mtu).
    type: int
attributes:
  check_mode:
    support: full
    description: Reports whether the network would be created, replaced or removed.
  diff_mode:
    support: none
    description: Returns no diff; RV(network) and RV(removed) say what changed.
  idempotent:
    support: full
    description:
      - A network that exists for the same session id is left alone, and removing networks
        that are gone is not an error, so a second run reports no change.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.session
  - bai.cluster.docker
"""

EXAMPLES = r"""
- name: Create the session bridge on its agent
  bai.cluster.bai_session_network:
    session: train
    session_id: "{{ plan.session_id }}"
    name: "{{ plan.network.name }}"
    labels: "{{ plan.network.labels }}"
    driver: bridge
  delegate_to: "{{ plan.agents[0] }}"

- name: Remove the session's networks
  bai.cluster.bai_session_network:
    session: train
    state: absent
"""

RETURN = r"""
network:
  description:
    - The network (C(name), C(id), C(driver), C(subnet), C(labels)); null with
      O(state=absent).
    - In check mode, a network still to be created has C(id) null and no C(subnet).
  returned: success
  type: dict
  sample: {name: bai-train-net, id: 0123456789ab, driver: bridge, subnet: 10.224.0.0/24,
           labels: {ai.backend.cluster.session: train}}
removed:
  description:
    - Names of the networks removed - with O(state=present), a leftover of an earlier
      instance of the session that was replaced; with O(state=absent), every network of
      the session (in check mode, those that would be).
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Failure,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    connect,
    error_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module, says
from ansible_collections.bai.cluster.plugins.module_utils.network.session_network import (
    absent,
    present,
)
from ansible_collections.bai.cluster.plugins.module_utils.network.subnets import (
    DEFAULT_SUBNET_POOL,
    DEFAULT_SUBNET_PREFIX,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import (
    SESSION_ARGUMENT_SPEC,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **SESSION_ARGUMENT_SPEC,
            "name": {"type": "str"},
            "labels": {"type": "dict", "default": {}},
            "driver": {"type": "str", "choices": ["bridge", "overlay"], "default": "bridge"},
            "subnet_pool": {"type": "str", "default": DEFAULT_SUBNET_POOL},
            "subnet_prefix": {"type": "int", "default": DEFAULT_SUBNET_PREFIX},
            "mtu": {"type": "int"},
            **DOCKER_ARGUMENT_SPEC,
        },
        required_if=[("state", "present", ("session_id",))],
        supports_check_mode=True,
    )
    docker_ = connect(module)
    p = module.params
    run_module(
        module,
        lambda: (
            present(docker_.api, p, module.check_mode)
            if p["state"] == "present"
            else absent(docker_.api, p["session"], p["name"], module.check_mode)
        ),
        ((Failure, SpecError), str),
        (DockerException, says(f"Docker error on network of session {p['session']}: ", error_text)),
    )


if __name__ == "__main__":
    main()
