"""bai_session_network run as a module - its ``main()``, argument spec included - against
a Docker engine in memory.

SIMULATED: the engine is tests/unit/docker_fake.py's ``FakeEngine`` (docker-py's
low-level client in memory; the integration suite runs the same module against real
engines). The arguments are what playbooks/session_make.yml passes: the network of the
real planner's plan (``plan_session`` over ``normalize_spec``); each test checks what the
engine holds afterwards.
"""

from __future__ import annotations

import ipaddress

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec
from ansible_collections.bai.cluster.plugins.modules import bai_session_network
from docker_fake import GI, FakeEngine, api_error, run_module


def planned(*args, **kwargs):
    """The plan as the module gives it (SessionPlan.to_dict)."""
    return plan_session(*args, **kwargs).to_dict()


POOL = ipaddress.ip_network("10.224.0.0/12")  # the module's default subnet_pool


@pytest.fixture
def engine() -> FakeEngine:
    # Someone else's bridge already uses the pool's first /24.
    return FakeEngine(networks={"lab-net": "10.224.0.0/24"})


def plan_for(name="s1"):
    spec = normalize_spec({"name": name, "size": 2})
    return planned(spec, [Agent("agent1", "default", 8, 16 * GI, 0)])


def args_for(plan, **override):
    """As session_make.yml's "Create the session network" task passes them."""
    network = plan["network"]
    args = {
        "session": plan["summary"]["name"],
        "session_id": plan["session_id"],
        "name": network["name"],
        "labels": network["labels"],
        "driver": network["driver"],
    }
    return {**args, **override}


def run(args, engine, **kwargs):
    return run_module(bai_session_network, args, engine, **kwargs)


def subnet_of(item):
    (config,) = item["IPAM"]["Config"]
    return config["Subnet"]


def test_a_bridge_is_created_with_a_free_subnet_of_the_pool(engine):
    plan = plan_for()

    result = run(args_for(plan), engine)

    assert result["changed"] is True, result
    made = engine.network_named("bai-s1-net")
    assert made is not None and made["Driver"] == "bridge"
    # The lowest /24 of the pool that no network of the engine uses.
    assert subnet_of(made) == "10.224.1.0/24"
    for item in engine.nets.values():
        if item is not made and item["IPAM"]["Config"]:
            assert not ipaddress.ip_network(subnet_of(item)).overlaps(
                ipaddress.ip_network(subnet_of(made))
            )
    assert made["Labels"] == plan["network"]["labels"]
    assert made["Labels"][LABEL_SESSION] == "s1"
    assert made["Labels"][LABEL_SESSION_ID] == plan["session_id"]
    assert result["network"] == {
        "name": "bai-s1-net",
        "id": made["Id"][:12],
        "driver": "bridge",
        "subnet": "10.224.1.0/24",
        "labels": plan["network"]["labels"],
    }
    assert result["removed"] == []


def test_a_second_run_changes_nothing(engine):
    args = args_for(plan_for())
    first = run(args, engine)
    engine.calls.clear()

    again = run(args, engine)

    assert again["changed"] is False, again
    assert again["network"] == first["network"]
    assert [n["Name"] for n in engine.nets.values()].count("bai-s1-net") == 1
    assert engine.called("create_network") == engine.called("remove_network") == []


def test_check_mode_creates_nothing(engine):
    result = run(args_for(plan_for()), engine, check_mode=True)

    assert result["changed"] is True
    assert result["network"]["id"] is None
    assert engine.network_named("bai-s1-net") is None
    assert engine.called("create_network") == []


def test_the_mtu_becomes_the_bridge_driver_option(engine):
    args = args_for(plan_for(), mtu=1450)
    run(args, engine)

    # With the interface name the isolation table matches (module_utils/network/isolation.py).
    assert engine.network_named("bai-s1-net")["Options"] == {
        "com.docker.network.driver.mtu": "1450",
        "com.docker.network.bridge.name": "bais-" + args["session_id"].replace("-", "")[:10],
    }


def test_a_subnet_taken_by_a_concurrent_create_is_skipped(engine):
    engine.fail(
        "create_network",
        "bai-s1-net",
        api_error(403, "Pool overlaps with other one on this address space"),
    )

    result = run(args_for(plan_for()), engine)

    assert result["changed"] is True, result
    assert engine.called("create_network") == ["bai-s1-net", "bai-s1-net"]
    subnet = ipaddress.ip_network(result["network"]["subnet"])
    assert subnet.subnet_of(POOL) and subnet.prefixlen == 24
    assert str(subnet) not in ("10.224.0.0/24", "10.224.1.0/24")


@pytest.mark.parametrize(
    ("override", "says"),
    [
        # A full pool fails naming it.
        ({"subnet_pool": "10.224.0.0/24"}, "subnet_pool 10.224.0.0/24: no free /24 left"),
        # An overlay off a swarm manager fails with what to do.
        ({"driver": "overlay"}, "overlay networks are created on a Docker Swarm manager"),
    ],
    ids=["full-pool", "overlay-off-a-manager"],
)
def test_a_network_that_cannot_be_made_fails_saying_why_and_makes_nothing(engine, override, says):
    result = run(args_for(plan_for(), **override), engine)

    assert result["failed"] is True
    assert says in result["msg"]
    assert engine.network_named("bai-s1-net") is None


def test_a_network_of_that_name_not_of_the_session_is_not_touched(engine):
    engine.create_network("bai-s1-net", labels={"owner": "someone"})

    result = run(args_for(plan_for()), engine)

    assert result["failed"] is True
    assert "network bai-s1-net exists but is not a network of session s1" in result["msg"]
    assert engine.network_named("bai-s1-net")["Labels"] == {"owner": "someone"}
    assert engine.called("remove_network") == []


def test_an_empty_leftover_of_another_instance_is_replaced(engine):
    old = plan_for()
    run(args_for(old), engine)
    new = plan_for()

    result = run(args_for(new), engine)

    assert result["changed"] is True, result
    assert result["removed"] == ["bai-s1-net"]
    labels = engine.network_named("bai-s1-net")["Labels"]
    assert labels[LABEL_SESSION_ID] == new["session_id"] != old["session_id"]


def test_a_leftover_with_containers_is_kept(engine):
    old = plan_for()
    run(args_for(old), engine)
    engine.create_container(
        "bai/session:latest",
        name="bai-s1-main1",
        host_config=engine.create_host_config(network_mode="bai-s1-net"),
    )

    result = run(args_for(plan_for()), engine)

    assert result["failed"] is True
    assert "belongs to another instance of session s1" in result["msg"]
    assert engine.network_named("bai-s1-net")["Labels"][LABEL_SESSION_ID] == old["session_id"]


def test_state_absent_removes_the_session_s_network(engine):
    run(args_for(plan_for()), engine)
    run(args_for(plan_for("s2")), engine)

    result = run({"session": "s1", "state": "absent"}, engine)

    assert result["changed"] is True, result
    assert result["removed"] == ["bai-s1-net"]
    assert engine.network_named("bai-s1-net") is None
    assert engine.network_named("bai-s2-net") is not None
    assert engine.network_named("lab-net") is not None

    again = run({"session": "s1", "state": "absent"}, engine)
    assert again["changed"] is False and again["removed"] == []


def test_state_absent_fails_while_containers_are_attached(engine):
    run(args_for(plan_for()), engine)
    engine.create_container(
        "bai/session:latest",
        name="bai-s1-main1",
        host_config=engine.create_host_config(network_mode="bai-s1-net"),
    )

    result = run({"session": "s1", "state": "absent"}, engine)

    assert result["failed"] is True
    assert "cannot remove network bai-s1-net" in result["msg"]
    assert "remove the session's containers first" in result["msg"]
    assert engine.network_named("bai-s1-net") is not None


def test_present_without_a_session_id_fails_before_docker_is_reached(engine):
    result = run({"session": "s1"}, engine)

    assert result["failed"] is True
    assert "session_id" in result["msg"]
    assert engine.connections == 0
