"""bai_agent_info run as a module (its ``main()``) against a Docker engine in memory,
after bai_session_containers made a session there: what an agent reports of itself is
what the planner and the admission count.

SIMULATED: the engine is tests/unit/docker_fake.py's ``FakeEngine`` (the integration
suite runs the same modules against real engines); the agent has no GPU and no RDMA
device (``detect`` and ``rdma_devices`` patched).
"""

from __future__ import annotations

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec
from ansible_collections.bai.cluster.plugins.modules import bai_agent_info
from containers_fake import AGENT, NO_GPU, args_for, plan_for
from containers_fake import run as run_containers
from docker_fake import GI, run_module


def planned(*args, **kwargs):
    """The plan as the module gives it (SessionPlan.to_dict)."""
    return plan_session(*args, **kwargs).to_dict()


HOST = {(bai_agent_info, "detect"): lambda probe: NO_GPU, (bai_agent_info, "rdma_devices"): list}
AGENT_FIELDS = ("name", "group", "cpu", "mem", "gpu", "used_cpu", "used_mem", "used_gpu")


def info(engine, **args):
    """As session_place_reads.yml asks (the agent's own offer: the engine's)."""
    return run_module(
        bai_agent_info,
        {"agent_name": AGENT, "resource_group": "default", **args},
        engine,
        patches=HOST,
    )


def test_an_empty_agent_offers_what_its_engine_reports(engine, tmp_path):
    result = info(engine, images=["bai/session:latest", "bai/other:1"], paths=[str(tmp_path)])

    assert result["changed"] is False, result
    agent = result["agent"]
    assert agent["id"] == engine.engine_id
    assert (agent["cpu"], agent["mem"], agent["gpu"]) == (8.0, 16 * GI, 0)
    assert (agent["used_cpu"], agent["used_mem"], agent["used_gpu"]) == (0.0, 0, 0)
    assert agent["gpu_vendor"] == "none" and agent["rdma_devices"] == []
    assert result["containers"] == [] and result["sessions"] == {}
    assert result["images"]["bai/session:latest"]["present"] is True
    assert result["images"]["bai/other:1"] == {"present": False, "env": []}
    assert result["paths"] == {str(tmp_path): True}


def test_asked_for_them_an_agent_read_returns_its_addresses(engine):
    # For the app proxy's route when a rerun reads main1's agent; ip's answer is given.
    line = "2: eth0    inet 10.210.1.12/24 brd 10.210.1.255 scope global eth0"
    patches = {**HOST, (AnsibleModule, "run_command"): lambda module, argv, **kw: (0, line, "")}
    args = {"agent_name": AGENT, "resource_group": "default"}
    asked = run_module(bai_agent_info, {**args, "host_addresses": True}, engine, patches=patches)
    assert asked["host_addresses"] == [line] and asked["agent"]["name"] == AGENT
    assert "host_addresses" not in run_module(bai_agent_info, args, engine, patches=patches)


def test_a_session_made_by_bai_session_containers_is_reported_as_the_planner_reads_it(
    engine, tmp_path
):
    data_root = tmp_path / "data"
    data_root.mkdir()
    plan = plan_for("s1", cpu=3, mem="2g")
    made = run_containers(args_for(plan, tmp_path, data_root), engine)
    assert made["changed"] is True, made

    result = info(engine, name="s1", resources={"mem": "12g"})

    agent = result["agent"]
    assert (agent["cpu"], agent["mem"]) == (8.0, 12 * GI)
    assert (agent["used_cpu"], agent["used_mem"]) == (6.0, 4 * GI)
    assert result["sessions"][plan["session_id"]]["containers"] == 2
    rows = result["containers"]
    assert [r["name"] for r in rows] == ["bai-s1-main1", "bai-s1-sub1"]
    assert all(r["agent"] == AGENT and r["state"] == "running" for r in rows)
    assert rows[0]["ports"][0]["host_port"] == made["ssh_port"]

    # The planner, given this read, finds the session complete and running...
    spec = normalize_spec({"name": "s1", "size": 2, "resources": {"cpu": 3, "mem": "2g"}})
    seen = Agent(**{key: agent[key] for key in AGENT_FIELDS})
    again = planned(spec, [seen], existing=[ContainerRow.of(row) for row in rows])
    assert again["action"] == "exists" and again["ready"] is True
    assert again["session_id"] == plan["session_id"]
    assert again["ssh_port"] == made["ssh_port"]
    # ...and a session that needs more than the 2 CPUs left does not fit.
    with pytest.raises(Pending):
        planned(normalize_spec({"name": "s2", "size": 1, "resources": {"cpu": 3}}), [seen])


def test_a_virtual_agent_counts_only_its_own_slot(engine, tmp_path):
    data_root = tmp_path / "data"
    data_root.mkdir()
    args = args_for(plan_for("s1"), tmp_path, data_root)
    args["settings"] = {**args["settings"], "agent_id": "slot-a", "resources": {"cpu": 4}}
    made = run_containers(args, engine)
    assert made["changed"] is True, made
    assert {c.labels["ai.backend.cluster.agent-id"] for c in engine.store.values()} == {
        f"{engine.engine_id}/slot-a"
    }

    mine = info(engine, agent_id="slot-a", resources={"cpu": 4})["agent"]
    other = info(engine, agent_id="slot-b", resources={"cpu": 4})["agent"]

    assert mine["id"] == f"{engine.engine_id}/slot-a" and mine["used_cpu"] == 4.0
    assert other["id"] == f"{engine.engine_id}/slot-b" and other["used_cpu"] == 0.0
