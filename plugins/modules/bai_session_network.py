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
  state:
    description: Whether the network should exist.
    type: str
    choices: [present, absent]
    default: present
  session:
    description: The session name (value of the C(ai.backend.cluster.session) label).
    type: str
    required: true
  session_id:
    description: The session id; required with O(state=present).
    type: str
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
  - bai.cluster.docker
requirements:
  - docker SDK for Python 5.0 or later (Debian python3-docker works)
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

import random

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.docker_api import (
    DOCKER_ARGUMENT_SPEC,
    APIError,
    DockerException,
    NotFound,
    connect,
    engine_subnets,
    error_text,
    find_network,
)
from ansible_collections.bai.cluster.plugins.module_utils.errors import (
    Failure,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.labels import (
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.naming import network_name
from ansible_collections.bai.cluster.plugins.module_utils.subnets import (
    DEFAULT_SUBNET_POOL,
    pick_subnet,
)

SUBNET_ATTEMPTS = 32
# Docker's overlay driver gives containers its com.docker.network.driver.mtu option minus
# the VXLAN header (vxlanEncap in libnetwork's overlay driver).
VXLAN_OVERHEAD = 50


def describe(item: dict) -> dict:
    configs = (item.get("IPAM") or {}).get("Config") or []
    return {
        "name": item.get("Name"),
        "id": (item.get("Id") or "")[:12],
        "driver": item.get("Driver"),
        "subnet": configs[0].get("Subnet") if configs else None,
        "labels": item.get("Labels") or {},
    }


def present(module: AnsibleModule, api) -> dict:
    params = module.params
    session, session_id = params["session"], params["session_id"]
    name = params["name"] or network_name(session)
    labels = {**params["labels"], LABEL_SESSION: session, LABEL_SESSION_ID: session_id}
    changed = False
    current = find_network(api, name)
    if current is not None:
        found = current.get("Labels") or {}
        if found.get(LABEL_SESSION) != session:
            raise Failure(
                f"network {name} exists but is not a network of session {session} "
                f"(its labels: {found}); remove or rename it, the toolkit will not touch it"
            )
        if found.get(LABEL_SESSION_ID) == session_id:
            return {"changed": False, "network": describe(current), "removed": []}
        detail = api.inspect_network(current["Id"])
        if detail.get("Containers"):
            raise Failure(
                f"network {name} belongs to another instance of session {session} "
                f"(session id {found.get(LABEL_SESSION_ID)}) and still has containers; "
                f"destroy that session first"
            )
        changed = True
        if not module.check_mode:
            api.remove_network(current["Id"])
    if module.check_mode:
        return {
            "changed": True,
            "network": {"name": name, "id": None, "driver": params["driver"], "labels": labels},
            "removed": [],
        }
    created = create(module, api, name, labels)
    return {"changed": True, "network": describe(created), "removed": [name] if changed else []}


def create(module: AnsibleModule, api, name: str, labels: dict) -> dict:
    import docker

    params = module.params
    options = {}
    if params["mtu"]:
        # The option is the MTU the driver starts from: an overlay subtracts VXLAN's header.
        extra = VXLAN_OVERHEAD if params["driver"] == "overlay" else 0
        options["com.docker.network.driver.mtu"] = str(params["mtu"] + extra)
    if params["driver"] == "overlay":
        try:
            api.create_network(
                name,
                driver="overlay",
                attachable=True,
                labels=labels,
                options=options or None,
                check_duplicate=True,
            )
        except APIError as exc:
            text = error_text(exc)
            if "swarm" in text.lower():
                raise Failure(
                    f"cannot create overlay network {name}: {text}; overlay networks are "
                    f"created on a Docker Swarm manager (run site.yml so the docker_swarm "
                    f"role sets up the Swarm)"
                ) from None
            raise
        return find_network(api, name) or {"Name": name}
    tried: list[str] = []
    for attempt in range(SUBNET_ATTEMPTS):
        # First try the lowest free subnet; after losing a race, a random one of the
        # next few, so that concurrent creates stop colliding.
        subnet = pick_subnet(
            params["subnet_pool"],
            params["subnet_prefix"],
            engine_subnets(api),
            skip=tried,
            spread=1 if attempt == 0 else 16,
            rng=random,
        )
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
        try:
            api.create_network(
                name,
                driver="bridge",
                ipam=ipam,
                labels=labels,
                options=options or None,
                check_duplicate=True,
            )
        except APIError as exc:
            text = error_text(exc).lower()
            if "overlap" in text:
                tried.append(subnet)  # lost a race for this subnet: take the next
                continue
            if "already exists" in text:
                raced = find_network(api, name)
                if (
                    raced
                    and (raced.get("Labels") or {}).get(LABEL_SESSION_ID)
                    == labels[LABEL_SESSION_ID]
                ):
                    return raced
            raise
        return find_network(api, name) or {"Name": name}
    raise Failure(
        f"could not create network {name}: {SUBNET_ATTEMPTS} subnets of "
        f"{params['subnet_pool']} were taken concurrently ({', '.join(tried)})"
    )


def absent(module: AnsibleModule, api) -> dict:
    session = module.params["session"]
    name = module.params["name"] or network_name(session)
    found = {n["Id"]: n for n in api.networks(filters={"label": [f"{LABEL_SESSION}={session}"]})}
    named = find_network(api, name)
    if named and (named.get("Labels") or {}).get(LABEL_SESSION) == session:
        found[named["Id"]] = named
    removed = []
    for net_id, item in sorted(found.items(), key=lambda kv: kv[1].get("Name", "")):
        if not module.check_mode:
            try:
                api.remove_network(net_id)
            except APIError as exc:
                # NotFound is an APIError (and, without the SDK, both are the stand-in
                # DockerException): a network that is gone already is not an error.
                if isinstance(exc, NotFound):
                    continue
                raise Failure(
                    f"cannot remove network {item.get('Name')}: {error_text(exc)}; remove the "
                    f"session's containers first (bai_session_containers state=absent)"
                ) from None
        removed.append(item.get("Name"))
    return {"changed": bool(removed), "network": None, "removed": removed}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "session": {"type": "str", "required": True},
            "session_id": {"type": "str"},
            "name": {"type": "str"},
            "labels": {"type": "dict", "default": {}},
            "driver": {"type": "str", "choices": ["bridge", "overlay"], "default": "bridge"},
            "subnet_pool": {"type": "str", "default": DEFAULT_SUBNET_POOL},
            "subnet_prefix": {"type": "int", "default": 24},
            "mtu": {"type": "int"},
            **DOCKER_ARGUMENT_SPEC,
        },
        required_if=[("state", "present", ("session_id",))],
        supports_check_mode=True,
    )
    docker_ = connect(module)
    try:
        if module.params["state"] == "present":
            result = present(module, docker_.api)
        else:
            result = absent(module, docker_.api)
    except (Failure, SpecError) as exc:
        module.fail_json(msg=str(exc))
    except DockerException as exc:
        module.fail_json(
            msg=f"Docker error on network of session {module.params['session']}: {error_text(exc)}"
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
