"""Unit tests of plugins/module_utils/hosts/swarm.py and the roles' filter plugins that wrap it.

The swarm states below are trimmed ``docker info .Swarm`` answers of Docker 20.10: what
a node in no swarm, a manager, a worker of *this* cluster and a worker of *another*
cluster look like from the inside.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.hosts import swarm as sw

ROOT = Path(__file__).resolve().parents[5]

INACTIVE = {"NodeID": "", "NodeAddr": "", "LocalNodeState": "inactive", "ControlAvailable": False}


def active(node_id, addr, *, manager=("mgr0", "10.210.3.2:2377"), control=False, **more):
    """``docker info .Swarm`` of an active node: its ID and address, whether it manages
    (ControlAvailable) and the one manager it knows (ID, address)."""
    return {
        "NodeID": node_id,
        "NodeAddr": addr,
        "LocalNodeState": "active",
        "ControlAvailable": control,
        "RemoteManagers": [{"NodeID": manager[0], "Addr": manager[1]}],
        **more,
    }


MANAGER = active(
    "mgr0",
    "10.210.3.2",
    control=True,
    Cluster={"ID": "cluster-a", "DefaultAddrPool": ["10.196.0.0/14"], "SubnetSize": 24},
)
OUR_WORKER = active("agent1-id", "10.210.3.4")
# Same shape as OUR_WORKER: only the manager's node list tells them apart.
FOREIGN_WORKER = active("stranger-id", "10.210.3.5", manager=("other-mgr", "10.99.0.7:2377"))
CLUSTER = ["mgr0", "agent1-id", "agent2-id"]


# --- advertise_address ---------------------------------------------------------------------
def test_address_is_the_one_inside_the_compute_zone():
    addrs = ["10.210.2.3", "10.200.0.1", "10.210.3.2"]
    assert sw.advertise_address(addrs, "10.210.3.0/24", "10.210.2.3") == "10.210.3.2"


def test_address_ignores_ipv6_and_prefixes():
    assert sw.advertise_address(["fd00::1", "10.210.3.9/24"], "10.210.3.0/24") == "10.210.3.9"


def test_no_address_in_the_compute_zone_is_an_error_that_lists_what_the_host_has():
    with pytest.raises(
        ValueError,
        match=r"no IPv4 address in the compute zone 10\.210\.3\.0/24 "
        r"\(the host has: 10\.210\.2\.3, 172\.17\.0\.1\)",
    ):
        sw.advertise_address(["10.210.2.3", "172.17.0.1"], "10.210.3.0/24", "10.210.2.3")


def test_without_a_compute_zone_the_default_address_is_used():
    assert sw.advertise_address(["10.0.0.5", "192.168.1.2"], None, "192.168.1.2") == "192.168.1.2"


def test_without_zone_or_default_address_is_an_error():
    with pytest.raises(ValueError, match="no compute zone"):
        sw.advertise_address(["10.0.0.5"], None, None)


def test_invalid_zone_is_an_error():
    with pytest.raises(ValueError, match="not a valid CIDR"):
        sw.advertise_address(["10.0.0.5"], "10.0.0.0/33")


# --- manager_membership ---------------------------------------------------------------
def test_manager_in_no_swarm_inits():
    assert sw.manager_membership(INACTIVE, "manager")["action"] == "init"
    assert sw.manager_membership(None)["action"] == "init"


def test_manager_that_manages_a_swarm_is_ok():
    decision = sw.manager_membership(MANAGER, "manager")
    assert decision == {"action": "ok", "reason": "manager manages swarm cluster-a"}


def test_manager_that_is_a_worker_elsewhere_is_a_conflict_with_instructions():
    decision = sw.manager_membership(FOREIGN_WORKER, "manager")
    assert decision["action"] == "conflict"
    assert "is a worker of another swarm (its managers: 10.99.0.7:2377)" in decision["reason"]
    assert "docker swarm leave --force on manager" in decision["reason"]
    assert "docker_swarm_force_rejoin: true" in decision["reason"]


def test_manager_that_is_a_worker_elsewhere_rejoins_when_forced():
    assert sw.manager_membership(FOREIGN_WORKER, "manager", force=True)["action"] == "rejoin"


# --- member_membership: WHICH swarm ---------------------------------------------------
def test_node_in_no_swarm_joins():
    assert sw.member_membership(INACTIVE, CLUSTER, "agent1", "manager")["action"] == "join"


def test_node_known_to_the_manager_is_ok():
    decision = sw.member_membership(OUR_WORKER, CLUSTER, "agent1", "manager")
    assert decision == {
        "action": "ok",
        "reason": "agent1 is node agent1-id of the swarm manager manages",
    }


def test_node_in_a_different_swarm_is_detected_and_refused():
    decision = sw.member_membership(FOREIGN_WORKER, CLUSTER, "agent2", "manager")
    assert decision["action"] == "conflict"
    reason = decision["reason"]
    assert "agent2 is in a different swarm: its node ID stranger-id is unknown to manager" in reason
    assert "(its managers: 10.99.0.7:2377)" in reason
    assert "docker swarm leave --force on agent2" in reason
    assert "docker_swarm_force_rejoin: true" in reason


def test_node_in_a_different_swarm_rejoins_when_forced():
    decision = sw.member_membership(FOREIGN_WORKER, CLUSTER, "agent2", "manager", force=True)
    assert decision["action"] == "rejoin"


@pytest.mark.parametrize("state", ["active", "pending", "error"])
def test_a_node_removed_from_this_very_swarm_rejoins_unforced(state):
    """agent remove --dead took its node out while it was off: its managers are the
    cluster's own and no longer know it, so leaving loses nothing."""
    removed = {
        "LocalNodeState": state,
        "NodeID": "old-id",
        "RemoteManagers": [{"NodeID": "m1", "Addr": "10.210.3.11:2377"}],
    }
    decision = sw.member_membership(removed, CLUSTER, "agent2", "manager", False, ["m1"])
    assert decision["action"] == "rejoin" and "was removed from the swarm" in decision["reason"]
    # Managers that are not the cluster's: still another swarm, refused.
    assert sw.member_membership(removed, CLUSTER, "agent2", "manager", False, ["m9"])["action"] == (
        "conflict"
    )


def test_active_node_is_foreign_when_the_manager_has_no_swarm_yet():
    """The manager is about to init: every node already active belongs elsewhere."""
    assert sw.member_membership(OUR_WORKER, [], "agent1", "manager")["action"] == "conflict"


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (
            {"LocalNodeState": "pending", "RemoteManagers": [{"Addr": "10.9.9.9:2377"}]},
            "swarm state 'pending' (managers: 10.9.9.9:2377)",
        ),
        (
            {"LocalNodeState": "error", "Error": "certificate expired"},
            "swarm state 'error' (certificate expired)",
        ),
        ({"LocalNodeState": "locked"}, "locked swarm"),
    ],
)
def test_stuck_or_locked_nodes_are_refused_unless_forced(state, words):
    refused = sw.member_membership(state, CLUSTER, "agent1", "manager")
    assert refused["action"] == "conflict" and words in refused["reason"]
    assert (
        sw.member_membership(state, CLUSTER, "agent1", "manager", force=True)["action"] == "rejoin"
    )


# --- node lists -----------------------------------------------------------------------
LS = [  # docker node ls --format '{{json .}}'
    {"ID": "mgr0", "Hostname": "manager", "Status": "Ready"},
    {"ID": "agent1-id", "Hostname": "agent1", "Status": "Ready"},
    {"ID": "agent1-old", "Hostname": "agent1", "Status": "Down"},
    {"ID": "someone", "Hostname": "not-ours", "Status": "Down"},
    {"ID": "agent2-old", "Hostname": "agent2", "Status": "Ready"},
]
INSPECT = [  # docker node inspect
    {
        "ID": "mgr0",
        "Description": {"Hostname": "manager"},
        "Status": {"State": "ready"},
        "Spec": {"Labels": {}},
    },
    {
        "ID": "agent1-id",
        "Description": {"Hostname": "agent1"},
        "Status": {"State": "ready"},
        "Spec": {"Labels": {"ai.backend.resource-group": "default", "keep": "me"}},
    },
    {
        "ID": "agent2-id",
        "Description": {"Hostname": "agent2"},
        "Status": {"State": "down"},
        "Spec": {"Labels": {"ai.backend.resource-group": "old"}},
    },
    {
        "ID": "agent2-old",
        "Description": {"Hostname": "agent2"},
        "Status": {"State": "down"},
        "Spec": {},
    },
]
CURRENT = {"manager": "mgr0", "agent1": "agent1-id", "agent2": "agent2-id"}


def test_stale_nodes_are_down_entries_of_members_with_an_old_id():
    # agent2-old is Ready (not ours to remove), someone is not a member: both stay.
    assert sw.stale_nodes(LS, CURRENT) == ["agent1-old"]
    assert sw.stale_nodes(INSPECT, CURRENT) == ["agent2-old"]


def test_ready_nodes_in_either_format():
    assert sw.ready_nodes(LS) == ["mgr0", "agent1-id", "agent2-old"]
    assert sw.ready_nodes(INSPECT) == ["mgr0", "agent1-id"]


def test_label_changes_only_where_a_wanted_label_is_missing_or_differs():
    wanted = {
        "mgr0": {},
        "agent1-id": {"ai.backend.resource-group": "default"},
        "agent2-id": {"ai.backend.resource-group": "gpu"},
        "unknown-id": {"x": "y"},
    }
    assert sw.label_changes(INSPECT, wanted) == [
        {"id": "agent2-id", "labels": {"ai.backend.resource-group": "gpu"}}
    ]


# --- pools, ports, registries ---------------------------------------------------------
def test_pool_differences():
    cluster = MANAGER["Cluster"]
    assert sw.pool_differences(cluster, ["10.196.0.0/14"], 24) == []
    assert sw.pool_differences(cluster, ["10.196.0.0/15"], 26) == [
        "address pool 10.196.0.0/14 (configured: 10.196.0.0/15)",
        "subnet size /24 (configured: /26)",
    ]
    assert sw.pool_differences({}, ["10.196.0.0/14"], 24) == []


def test_taken_ports_reads_ss_output():
    lines = [
        'tcp LISTEN 0 4096 10.210.3.2:2377 0.0.0.0:* users:(("dockerd",pid=1,fd=3))',
        "udp UNCONN 0 0 *:7946 *:*",
        "tcp LISTEN 0 128 [::]:4789 [::]:*",
        "udp UNCONN 0 0 127.0.0.11:52721 0.0.0.0:*",
        "short line",
    ]
    needed = ["2377/tcp", "7946/tcp", "7946/udp", "4789/udp"]
    assert sw.taken_ports(lines, needed) == [lines[0], "udp UNCONN 0 0 *:7946 *:*"]
    assert sw.taken_ports(lines, ["4789/udp"]) == []  # 4789 is held over tcp only


@pytest.mark.parametrize(
    ("config", "registry", "insecure"),
    [
        ({"InsecureRegistryCIDRs": ["10.210.3.0/24", "127.0.0.0/8"]}, "10.210.3.2:5000", True),
        ({"InsecureRegistryCIDRs": ["127.0.0.0/8"]}, "10.210.3.2:5000", False),
        ({"InsecureRegistryCIDRs": ["127.0.0.0/8"]}, "127.0.0.1:5000", True),
        ({"IndexConfigs": {"reg.lan:5000": {"Secure": False}}}, "reg.lan:5000", True),
        ({"IndexConfigs": {"docker.io": {"Secure": True}}}, "reg.lan:5000", False),
        (None, "10.0.0.1:5000", False),
    ],
)
def test_registry_is_insecure(config, registry, insecure):
    assert sw.registry_is_insecure(config, registry) is insecure


# --- the filter plugin loads this module -----------------------------------------------
@pytest.mark.parametrize(
    ("path", "names"),
    [
        (
            "plugins/filter/bai_swarm.py",
            {"bai_swarm_address", "bai_swarm_member_membership", "bai_swarm_taken_ports"},
        ),
        (
            "plugins/filter/bai_swarm.py",
            {"bai_image_registry_address", "bai_image_registry_is_insecure"},
        ),
    ],
)
def test_role_filters_wrap_module_utils(path, names):
    module = importlib.import_module(
        "ansible_collections.bai.cluster." + path.removesuffix(".py").replace("/", ".")
    )
    filters = module.FilterModule().filters()
    assert names <= set(filters)
    address = next(f for n, f in filters.items() if n.endswith("_address"))
    assert address(["10.210.3.7"], "10.210.3.0/24") == {"address": "10.210.3.7", "error": None}
    assert address(["10.0.0.1"], "10.210.3.0/24")["error"].startswith("no IPv4 address")


# --- manager_removal: never lose the quorum ---------------------------------------------
def managers(*states):
    """docker node ls rows: manager1..N with these ManagerStatus values, then a worker."""
    rows = [
        {"ID": f"m{i}", "Hostname": f"manager{i}", "ManagerStatus": s}
        for i, s in enumerate(states, 1)
    ]
    return [*rows, {"ID": "w1", "Hostname": "agent1", "ManagerStatus": ""}]


def test_one_of_three_answering_managers_may_go():
    found = sw.manager_removal(managers("Leader", "Reachable", "Reachable"), "manager3")
    assert found == {"id": "m3", "managers": 3, "answering": 3, "manager": True, "problem": ""}


def test_a_removal_that_would_lose_the_quorum_is_refused_naming_the_counts():
    found = sw.manager_removal(managers("Leader", "Unreachable", "Reachable"), "manager3")
    assert found["id"] == "m3"
    assert found["problem"].startswith(
        "2 of the swarm's 3 managers answer; without manager3, 1 of 2 would, and the swarm "
        "needs 2 of 2"
    )


def test_a_manager_that_does_not_answer_may_go_while_the_rest_keep_the_quorum():
    found = sw.manager_removal(managers("Leader", "Reachable", "Unreachable"), "manager3")
    assert found["problem"] == "" and found["answering"] == 2


def test_the_last_manager_is_refused():
    assert "last manager" in sw.manager_removal(managers("Leader"), "manager1")["problem"]


def test_a_manager_demoted_by_a_removal_that_stopped_part_way_may_go_on():
    found = sw.manager_removal(managers("Leader", "Reachable"), "agent1")
    assert found == {"id": "w1", "managers": 2, "answering": 2, "manager": False, "problem": ""}


def test_a_manager_the_swarm_no_longer_lists_is_removed_already():
    found = sw.manager_removal(managers("Leader", "Reachable"), "manager3")
    assert found["id"] == "" and found["problem"] == ""


@pytest.mark.parametrize("count", [3, 5, 7])
def test_with_every_manager_answering_any_but_the_last_may_go(count):
    rows = managers("Leader", *["Reachable"] * (count - 1))
    assert all(sw.manager_removal(rows, f"manager{i}")["problem"] == "" for i in range(1, count))
