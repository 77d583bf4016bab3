"""Planning a session, subnets from the toolkit's pool, session listing (pure logic)."""

import ipaddress
import random
import re

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Pending,
    SessionConflict,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_HOST,
    LABEL_MODE,
    LABEL_SESSION_ID,
    LABEL_SIZE,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import (
    format_table,
    summarize_sessions,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.network.subnets import (
    DEFAULT_SUBNET_POOL,
    DEFAULT_SUBNET_PREFIX,
    pick_subnet,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    agent_capacity,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    Stock,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import (
    placement_failure,
    plan_session,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    PlannedKernel,
    Resources,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec


def planned(*args, **kwargs):
    """The plan as the module gives it (SessionPlan.to_dict)."""
    return plan_session(*args, **kwargs).to_dict()


GI = 1024**3


def spec(**raw):
    return normalize_spec({"name": "s1", **raw})


def agent(name, cpu=4, mem_g=8, group="default", used_cpu=0.0):
    return Agent(name, group, cpu, mem_g * GI, 0, used_cpu, 0, 0)


def rows_of(raw):
    """The ContainerRows of bai_agent_info's JSON rows, as a read hands them on."""
    return [ContainerRow.of(row) for row in raw]


def as_existing(plan, state="running", ports=()):
    """What bai_agent_info would report for the containers of ``plan``."""
    return [
        {
            "agent": k["agent"],
            "name": k["container_name"],
            "state": state,
            "image": k["image"],
            "labels": k["labels"],
            "ports": list(ports) if k["rank"] == 0 else [],
        }
        for k in plan["kernels"]
    ]


# --- create ---------------------------------------------------------------------------
def test_new_session_is_planned_on_one_agent_with_a_bridge():
    got = planned(spec(size=3), [agent("a1"), agent("a2", used_cpu=1)])
    assert got["action"] == "create"
    assert got["ready"] is False
    assert got["mode"] == "single-node"
    assert got["agents"] == ["a1"]
    assert got["network"]["name"] == "bai-s1-net"
    assert got["network"]["driver"] == "bridge"
    assert got["network"]["labels"][LABEL_SESSION_ID] == got["session_id"]
    hosts = [k["hostname"] for k in got["kernels"]]
    assert hosts == ["main1", "sub1", "sub2"]
    assert got["kernels"][0]["kernel_id"] == got["session_id"]
    assert len({k["kernel_id"] for k in got["kernels"]}) == 3
    sub2 = got["kernels"][2]
    assert sub2["container_name"] == "bai-s1-sub2"
    # /dev/shm: half of the memory when not asked for.
    assert sub2["resources"] == {"cpu": 1.0, "mem": GI, "gpu": 0, "shm": GI // 2}
    assert sub2["labels"][LABEL_HOST] == "sub2"
    assert sub2["labels"][LABEL_SIZE] == "3"
    assert sub2["labels"][LABEL_MODE] == "single-node"
    summary = got["summary"]
    assert summary["session_id"] == got["session_id"]
    assert summary["containers"][2] == {
        "host": "sub2",
        "role": "sub",
        "idx": 2,
        "agent": "a1",
        "kernel_id": sub2["kernel_id"],
        "container": "bai-s1-sub2",
    }


def test_the_plan_s_kernels_read_back_into_the_same_objects():
    """The agents read plan.kernels into PlannedKernel, the object the plan made them
    from: one shape from the plan to the containers."""
    got = planned(spec(size=3, resources={"cpu": 0.5, "shm": "128m"}), [agent("a1")])
    for raw in got["kernels"]:
        kernel = PlannedKernel.from_dict(raw)
        assert kernel.to_dict() == raw
        assert (kernel.hostname, kernel.agent, kernel.resources.shm) == (
            raw["hostname"],
            "a1",
            128 * 1024**2,
        )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"resources": None}, "is not a kernel of the session's plan"),
        ({"rank": "first"}, "is not a kernel of the session's plan"),
        ({"gpu_devices": [0]}, "asks for 0 GPU(s) but the plan gave it devices [0]"),
    ],
)
def test_a_kernel_that_is_not_the_plan_s_is_named(change, says):
    raw = {**planned(spec(size=1), [agent("a1")])["kernels"][0], **change}
    with pytest.raises(SpecError, match=re.escape(says)):
        PlannedKernel.from_dict(raw)


def test_size_1_has_a_bridge_of_its_own():
    """Not the engine's default bridge, where an engine with icc on lets every size-1
    session reach the others (docs/networks.md#isolation-between-sessions)."""
    got = planned(spec(size=1), [agent("a1")])
    assert (got["network"]["name"], got["network"]["driver"]) == ("bai-s1-net", "bridge")
    assert got["summary"]["network"] == "bai-s1-net"


def test_spread_session_plans_an_overlay():
    got = planned(spec(size=4, mode="multi-node"), [agent("a1", cpu=2), agent("a2", cpu=2)])
    assert got["mode"] == "multi-node"
    assert sorted(got["agents"]) == ["a1", "a2"]
    assert got["agents"][0] == got["kernels"][0]["agent"]
    assert got["network"]["driver"] == "overlay"
    assert {k["labels"][LABEL_MODE] for k in got["kernels"]} == {"multi-node"}


def test_pending_is_raised_not_planned():
    with pytest.raises(Pending, match="PENDING"):
        planned(spec(size=5), [agent("a1"), agent("a2")])


def test_missing_image_or_mount_source_on_the_chosen_agent():
    raw = spec(size=2, mounts=[{"src": "/data", "dst": "/home/work/data"}])
    inventory = {
        "a1": Stock({"bai/session:latest": False}, {"/data": False}),
        "a2": Stock({"bai/session:latest": True}, {"/data": True}),
    }
    with pytest.raises(SpecError) as err:
        planned(raw, [agent("a1"), agent("a2", used_cpu=1)], inventory=inventory)
    text = str(err.value)
    assert "image bai/session:latest not on agent a1" in text
    assert "mounts[0].src: /data does not exist on agent a1" in text
    # An agent not asked about (no inventory entry) is not held against the plan.
    assert planned(raw, [agent("a1")], inventory={})["action"] == "create"


# --- exists / conflicts ---------------------------------------------------------------
def test_same_spec_again_reads_ids_and_placement_back():
    first = planned(spec(size=3), [agent("a1"), agent("a2")])
    port = {"container_port": 2200, "host_port": 30007}
    existing = as_existing(first, ports=[port])
    again = planned(spec(size=3), [agent("a1"), agent("a2")], rows_of(existing))
    assert again["action"] == "exists"
    assert again["ready"] is True
    assert again["ssh_port"] == 30007
    assert again["session_id"] == first["session_id"]
    assert again["kernels"] == first["kernels"]
    stopped = as_existing(first)
    stopped[1]["state"] = "exited"
    assert planned(spec(size=3), [], rows_of(stopped))["ready"] is False


def test_other_spec_is_a_conflict_that_describes_both():
    first = planned(spec(size=2), [agent("a1")])
    with pytest.raises(SessionConflict) as err:
        planned(spec(size=3), [agent("a1")], rows_of(as_existing(first)))
    text = str(err.value)
    assert "already exists with a different spec" in text
    assert "Existing: 2 container(s): main x1" in text
    assert "Requested: 3 container(s)" in text
    assert "session_destroy.yml -e session_name=s1" in text


def test_env_change_is_a_conflict_too():
    first = planned(spec(size=2), [agent("a1")])
    with pytest.raises(SessionConflict, match="different spec"):
        planned(spec(size=2, env={"A": "1"}), [agent("a1")], rows_of(as_existing(first)))


def test_incomplete_session_is_a_conflict():
    first = planned(spec(size=3), [agent("a1")])
    with pytest.raises(SessionConflict, match=r"incomplete \(missing: sub2"):
        planned(spec(size=3), [agent("a1")], rows_of(as_existing(first)[:2]))


def test_two_attempts_of_one_name_is_a_conflict():
    one = as_existing(planned(spec(size=2), [agent("a1")]))
    two = as_existing(planned(spec(size=2), [agent("a1")]))
    with pytest.raises(SessionConflict, match="more than one attempt"):
        planned(spec(size=2), [agent("a1")], rows_of(one + two[1:]))


def test_placement_failure_is_what_both_placing_modules_report():
    # bai_session_plan and bai_session_ledger fail with these; bai_cli reads the keys.
    assert placement_failure("s1", Pending("no agent has 8 CPUs free", permanent=True)) == {
        "msg": "session s1: PENDING: no agent has 8 CPUs free",
        "pending": True,
        "permanent": True,
    }
    assert placement_failure("s1", SessionConflict("s1 already exists")) == {
        "msg": "s1 already exists",
        "conflict": True,
    }
    assert placement_failure("s1", SpecError("image x not on agent a1")) == {
        "msg": "session s1: image x not on agent a1; nothing was created"
    }


# --- capacity ---------------------------------------------------------------------------
def test_agent_capacity_override_and_fallback():
    reported = agent_capacity(None, ncpu=8, mem_total=16 * GI)
    assert reported == Resources(8.0, 16 * GI, 0)
    partial = agent_capacity({"cpu": 4}, ncpu=8, mem_total=16 * GI)
    assert partial == Resources(4.0, 16 * GI, 0)
    full = agent_capacity({"cpu": "2.5", "mem": "8g", "gpu": 2}, ncpu=8, mem_total=GI)
    assert full == Resources(2.5, 8 * GI, 2)
    with pytest.raises(SpecError, match="bai_agent_resources.mem"):
        agent_capacity({"mem": "lots"}, ncpu=1, mem_total=GI)
    with pytest.raises(SpecError, match="unknown key"):
        agent_capacity({"cores": 2}, ncpu=1, mem_total=GI)


# --- subnets ----------------------------------------------------------------------------
def test_first_free_subnet_skips_used_and_lost_races():
    used = ["172.17.0.0/16", "10.224.0.0/24", "10.224.1.128/25", "fd00::/64"]
    assert pick_subnet("10.224.0.0/12", 24, used) == "10.224.2.0/24"
    got = pick_subnet("10.224.0.0/12", 24, used, skip=["10.224.2.0/24"])
    assert got == "10.224.3.0/24"


def test_a_big_used_network_blocks_every_subnet_inside_it():
    assert pick_subnet("10.224.0.0/12", 24, ["10.224.0.0/16"]) == "10.225.0.0/24"


def test_spread_picks_among_the_first_free_ones():
    rng = random.Random(1)
    picks = {pick_subnet("10.224.0.0/12", 24, [], spread=8, rng=rng) for _pick in range(50)}
    assert len(picks) > 1
    assert all(ipaddress.ip_network(p) < ipaddress.ip_network("10.224.8.0/24") for p in picks)


def test_forty_sessions_fit_in_the_default_pool():
    used = []
    for _session in range(40):
        used.append(pick_subnet(DEFAULT_SUBNET_POOL, DEFAULT_SUBNET_PREFIX, used))
    assert len(set(used)) == 40


def test_pool_exhaustion_and_bad_pool_are_clear():
    with pytest.raises(SpecError, match="no free /24 left"):
        pick_subnet("10.0.0.0/23", 24, ["10.0.0.0/24", "10.0.1.0/24"])
    with pytest.raises(SpecError, match="subnet_pool"):
        pick_subnet("10.0.0.1/23", 24, [])
    with pytest.raises(SpecError, match="subnet_prefix"):
        pick_subnet("10.0.0.0/23", 16, [])


# --- listing ----------------------------------------------------------------------------
def test_sessions_are_summarised_across_agents():
    one = planned(spec(size=3, mode="multi-node"), [agent("a1", cpu=2), agent("a2", cpu=2)])
    two = planned(normalize_spec({"name": "s2", "size": 2}), [agent("a1")])
    containers = as_existing(one) + as_existing(two)
    containers[-1]["state"] = "exited"
    containers.append({"agent": "a1", "name": "other", "state": "running", "labels": {}})
    rows = summarize_sessions(containers)
    assert [r["name"] for r in rows] == ["s1", "s2"]
    assert rows[0]["session_id"] == one["session_id"]
    assert (rows[0]["size"], rows[0]["mode"], rows[0]["state"]) == (3, "multi-node", "running")
    assert rows[0]["agents"] == ["a1", "a2"]
    assert (rows[1]["state"], rows[1]["running"]) == ("degraded", 1)
    table = format_table(rows)
    assert table[0].split() == ["NAME", "SESSION-ID", "SIZE", "MODE", "OWNER", "AGENTS", "STATE"]
    assert table[1].split()[4] == "-"  # made without an owner
    assert table[2].endswith("degraded (1/2 up)")


def test_a_session_missing_containers_is_incomplete_even_if_all_found_run():
    plan = planned(spec(size=3), [agent("a1")])
    (row,) = summarize_sessions(as_existing(plan)[:2])
    assert (row["size"], row["found"], row["state"]) == (3, 2, "incomplete")


def test_a_session_whose_containers_all_stopped_is_stopped():
    plan = planned(spec(size=2), [agent("a1")])
    stopped = [{**c, "state": "exited"} for c in as_existing(plan)]
    (row,) = summarize_sessions(stopped)
    assert (row["state"], row["running"]) == ("stopped", 0)
