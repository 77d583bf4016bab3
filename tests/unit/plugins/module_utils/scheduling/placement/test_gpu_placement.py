"""GPU sessions: validation, capacity, placement and device assignment.

SIMULATED capacities: no machine running these tests has a GPU, so agents are given
device indices as numbers (what ``bai_agent_info`` reports from detection, or from
``bai_agent_resources.gpu`` where nothing is detected). What is real: the validation,
the placement and device-assignment logic, the labels the plan writes and reads back.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    GpuError,
    Pending,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_GPU,
    LABEL_GPU_DEVICES,
    LABEL_HOST,
    LABEL_SESSION,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import (
    SOURCE_DECLARED,
    SOURCE_DETECTED,
    SOURCE_NONE,
    devices_in_use,
    offered_gpus,
    parse_device_label,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import (
    gpu_facts,
    parse_nvidia_smi_csv,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    PlacementRequest,
    assign_gpu_devices,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.model import Resources
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def planned(*args, **kwargs):
    """The plan as the module gives it (SessionPlan.to_dict)."""
    return plan_session(*args, **kwargs).to_dict()


GI = 1024**3
FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "gpu"


def spec(gpu=1, size=2, mode="single-node", roles=None, **extra):
    raw = {"name": "g", "size": None if roles else size, "mode": mode, "roles": roles}
    raw["resources"] = {"cpu": 1, "mem": "1g", "gpu": gpu}
    return normalize_spec({**raw, **extra})


def agent(name, devices=(), in_use=(), cpu=64, group="default", used_gpu=None):
    """An agent offering GPU ``devices``; ``in_use`` as session labels would say."""
    used = len(set(in_use) & set(devices)) if used_gpu is None else used_gpu
    return Agent(
        name,
        group,
        cpu,
        256 * GI,
        len(devices),
        used_gpu=used,
        gpu_devices=tuple(devices),
        gpu_in_use=tuple(in_use),
    )


# --- validation ------------------------------------------------------------------------
@pytest.mark.parametrize("value, want", [(0, 0), (2, 2), ("3", 3), (" 1 ", 1), (4.0, 4)])
def test_gpu_count_accepts_whole_numbers(value, want):
    got = spec(gpu=value)
    assert [role.resources.gpu for role in got.roles] == [want, want]


@pytest.mark.parametrize("value", [-1, 0.5, True, "two", "-1", [1], {"n": 1}])
def test_gpu_count_refuses_anything_else(value):
    with pytest.raises(SpecError, match=r"resources\.gpu: got .*whole number >= 0"):
        spec(gpu=value)


def test_a_role_may_ask_for_other_gpus_than_the_session():
    roles = [
        {"role": "main", "replicas": 1, "resources": {"gpu": 0}},
        {"role": "worker", "replicas": 2},
    ]
    got = spec(gpu=2, roles=roles)
    assert [(k.hostname, k.resources.gpu) for k in expand_kernels(got)] == [
        ("main1", 0),
        ("worker1", 2),
        ("worker2", 2),
    ]
    with pytest.raises(SpecError, match=r"roles\[1\]\.resources\.gpu"):
        spec(
            roles=[
                {"role": "main", "replicas": 1},
                {"role": "w", "replicas": 1, "resources": {"gpu": -2}},
            ]
        )


@pytest.mark.parametrize("key", ["GPU_COUNT", "N_GPUS"])
def test_gpu_variables_are_the_toolkits_not_the_users(key):
    with pytest.raises(SpecError, match=rf"env\.{key}: set by the toolkit.*resources\.gpu"):
        spec(env={key: "4"})


# --- what an agent offers ----------------------------------------------------------------
H100 = gpu_facts(
    "nvidia", parse_nvidia_smi_csv((FIXTURES / "nvidia-smi_h100x8.csv").read_text())[0][:4]
)


def test_detected_devices_win_over_the_declared_count():
    got = offered_gpus(H100, None)
    assert got == {
        "vendor": "nvidia",
        "devices": [0, 1, 2, 3],
        "source": SOURCE_DETECTED,
        "warning": None,
    }
    got = offered_gpus(H100, 2)
    assert got["devices"] == [0, 1, 2, 3] and got["source"] == SOURCE_DETECTED
    assert "declares 2 GPU(s) but 4 nvidia GPU(s) were detected (devices 0,1,2,3)" in got["warning"]
    assert offered_gpus(H100, 4)["warning"] is None


def test_without_detection_the_declared_count_is_simulated_devices():
    got = offered_gpus(gpu_facts("none"), 3)
    assert got["devices"] == [0, 1, 2] and got["source"] == SOURCE_DECLARED
    assert got["vendor"] == "none"
    assert "placement counts them as devices 0,1,2 (simulated)" in got["warning"]
    assert "cannot be created" in got["warning"]
    assert offered_gpus(gpu_facts("none"), 0) == {
        "vendor": "none",
        "devices": [],
        "source": SOURCE_NONE,
        "warning": None,
    }
    assert offered_gpus(None, None)["devices"] == []


def test_a_broken_driver_offers_nothing_detected_and_says_why():
    broken = gpu_facts("nvidia", status="driver_failed", problem="nvidia-smi: version mismatch")
    got = offered_gpus(broken, 2)
    assert got["source"] == SOURCE_DECLARED and "nvidia-smi: version mismatch" in got["warning"]
    assert offered_gpus(broken, None)["devices"] == []
    with pytest.raises(GpuError):
        offered_gpus(H100, -1)


def test_devices_count_as_taken_in_every_state_until_the_container_is_removed():
    listing = [
        {"State": "running", "Labels": {LABEL_GPU_DEVICES: "0,1"}},
        {"State": "created", "Labels": {LABEL_GPU_DEVICES: "2"}},  # being made right now
        {"State": "paused", "Labels": {LABEL_GPU_DEVICES: "3"}},
        {"State": "exited", "Labels": {LABEL_GPU_DEVICES: "4"}},  # its session may start it
        {"State": "dead", "Labels": {LABEL_GPU_DEVICES: "5"}},
        {"State": "restarting", "Labels": {LABEL_GPU_DEVICES: "6"}},
        {"State": "running", "Labels": {LABEL_GPU_DEVICES: ""}},
    ]
    assert devices_in_use(item["Labels"] for item in listing) == {0, 1, 2, 3, 4, 5, 6}


# --- capacity and placement ----------------------------------------------------------------
def test_free_gpus_are_the_offered_devices_nobody_holds():
    a = agent("a", devices=[0, 1, 2, 3], in_use=[1, 9])  # 9: not this agent's, ignored
    assert a.devices == (0, 1, 2, 3) and a.free_devices == (0, 2, 3)
    assert a.free == Resources(64.0, 256 * GI, 3)
    # A container labelled with a GPU count but no devices (older toolkit) counts too.
    legacy = agent("b", devices=[0, 1, 2, 3], in_use=[1], used_gpu=2)
    assert legacy.free.gpu == 2
    # Without device indices: anonymous 0..gpu-1.
    assert Agent("c", "default", 4, GI, 2).devices == (0, 1)


def test_single_node_goes_where_enough_devices_are_free():
    agents = [agent("a1", devices=range(4), in_use=[0, 1, 2]), agent("a2", devices=range(2))]
    got = place(PlacementRequest(expand_kernels(spec(gpu=1)), "single-node", "default"), agents)
    assert set(got.assignment.values()) == {"a2"}


def test_multi_node_spreads_gpu_containers_over_free_devices():
    agents = [agent("a1", devices=range(2), in_use=[0]), agent("a2", devices=range(2), in_use=[1])]
    kernels = expand_kernels(spec(gpu=1, mode="multi-node"))
    got = place(PlacementRequest(kernels, "multi-node", "default"), agents)
    assert sorted(got.assignment.values()) == ["a1", "a2"] and got.mode == "multi-node"
    devices = assign_gpu_devices(kernels, got.assignment, agents)
    assert {got.assignment[h]: d for h, d in devices.items()} == {"a1": [1], "a2": [0]}


def test_multi_node_finds_an_exact_fit_that_greedy_packing_misses():
    """Free 4, 5 and 6 GPUs; three 2-GPU and three 3-GPU containers fit only as
    6 = 3+3, 5 = 3+2, 4 = 2+2: worst-fit and best-fit-decreasing both fail here."""
    agents = [agent("a4", devices=range(4)), agent("a5", devices=range(5))]
    agents.append(agent("a6", devices=range(6)))
    roles = [
        {"role": "small", "replicas": 3, "resources": {"gpu": 2}},
        {"role": "big", "replicas": 3, "resources": {"gpu": 3}},
    ]
    plan = planned(spec(roles=roles, mode="multi-node"), agents)
    per_agent: dict[str, list[int]] = {}
    for kernel in plan["kernels"]:
        per_agent.setdefault(kernel["agent"], []).extend(kernel["gpu_devices"])
    assert {name: sorted(ids) for name, ids in per_agent.items()} == {
        "a4": [0, 1, 2, 3],
        "a5": [0, 1, 2, 3, 4],
        "a6": [0, 1, 2, 3, 4, 5],
    }
    assert plan["mode"] == "multi-node"


def test_a_gpu_request_on_agents_without_gpus_is_pending_for_ever_and_names_the_gpus():
    """The lab: both agents declare gpu 0 and have none."""
    agents = [agent("agent1"), agent("agent2")]
    with pytest.raises(Pending) as err:
        place(PlacementRequest(expand_kernels(spec(gpu=1)), "single-node", "default"), agents)
    text = str(err.value)
    assert text.startswith("PENDING: container main1 needs cpu 1, mem 1g, gpu 1")
    assert "GPUs asked for: 1; agent1 has no GPU; agent2 has no GPU" in text
    assert err.value.permanent


def test_gpus_held_by_other_sessions_make_it_pending_not_for_ever():
    agents = [agent("a1", devices=range(4), in_use=[0, 1, 3])]
    with pytest.raises(Pending) as err:
        place(PlacementRequest(expand_kernels(spec(gpu=1)), "single-node", "default"), agents)
    text = str(err.value)
    assert "a1: cpu 64, mem 256g, gpu 1 free (short of gpu)" in text
    assert "a1 has GPU devices 0,1,2,3, free: 2" in text
    assert not err.value.permanent
    with pytest.raises(Pending, match="free: 2") as err:
        place(
            PlacementRequest(
                expand_kernels(spec(gpu=1, size=3, mode="multi-node")), "multi-node", "default"
            ),
            [*agents, agent("a2", devices=[0], in_use=[0])],
        )
    assert "a2 has GPU devices 0, free: none" in str(err.value)


# --- the plan: devices per container, in labels ----------------------------------------------
def test_plan_gives_each_container_its_own_devices_and_labels_them():
    agents = [agent("a1", devices=range(8), in_use=[0, 1])]
    plan = planned(spec(gpu=2, size=3), agents)
    got = {k["hostname"]: k["gpu_devices"] for k in plan["kernels"]}
    assert got == {"main1": [2, 3], "sub1": [4, 5], "sub2": [6, 7]}
    for kernel in plan["kernels"]:
        label = kernel["labels"][LABEL_GPU_DEVICES]
        assert parse_device_label(label) == kernel["gpu_devices"]
        assert kernel["labels"][LABEL_GPU] == "2" and kernel["resources"]["gpu"] == 2


def test_plan_without_gpus_labels_no_devices():
    plan = planned(spec(gpu=0), [agent("a1", devices=range(2))])
    assert [k["gpu_devices"] for k in plan["kernels"]] == [[], []]
    assert {k["labels"][LABEL_GPU_DEVICES] for k in plan["kernels"]} == {""}


def test_mixed_roles_get_devices_by_need():
    roles = [
        {"role": "main", "replicas": 1, "resources": {"gpu": 0}},
        {"role": "worker", "replicas": 2, "resources": {"gpu": 2}},
        {"role": "eval", "replicas": 1, "resources": {"gpu": 1}},
    ]
    plan = planned(spec(roles=roles), [agent("a1", devices=range(6), in_use=[2])])
    got = {k["hostname"]: k["gpu_devices"] for k in plan["kernels"]}
    assert got == {"main1": [], "worker1": [0, 1], "worker2": [3, 4], "eval1": [5]}


def test_sessions_one_after_another_read_the_devices_back_from_labels():
    """What bai_agent_info does between two creates: labels -> in use -> next plan."""
    containers = []
    for n in range(4):
        held = devices_in_use(c["labels"] for c in containers)
        agents = [agent("a1", devices=range(8), in_use=sorted(held))]
        plan = planned(spec(gpu=1, size=2, name=f"s{n}"), agents)
        containers += [{"labels": k["labels"]} for k in plan["kernels"]]
    held = [i for c in containers for i in parse_device_label(c["labels"][LABEL_GPU_DEVICES])]
    assert sorted(held) == list(range(8))
    agents = [agent("a1", devices=range(8), in_use=held)]
    with pytest.raises(Pending, match="free: none"):
        planned(spec(gpu=1, size=1, name="s9"), agents)


def test_an_existing_session_reports_the_devices_in_its_labels():
    agents = [agent("a1", devices=range(4))]
    first = planned(spec(gpu=2), agents)
    existing = [
        {
            "agent": k["agent"],
            "name": k["container_name"],
            "state": "running",
            "image": k["image"],
            "labels": k["labels"],
        }
        for k in first["kernels"]
    ]
    # Now every device is held (by this very session): the rerun must not re-place it.
    busy = [agent("a1", devices=range(4), in_use=range(4))]
    again = planned(spec(gpu=2), busy, [ContainerRow.of(row) for row in existing])
    assert again["action"] == "exists" and again["ready"]
    assert [k["gpu_devices"] for k in again["kernels"]] == [
        k["gpu_devices"] for k in first["kernels"]
    ]
    assert (
        existing[0]["labels"][LABEL_SESSION] == "g" and existing[1]["labels"][LABEL_HOST] == "sub1"
    )


# --- properties ------------------------------------------------------------------------------
agent_layouts = st.lists(
    st.tuples(
        st.sets(st.integers(0, 9), max_size=8),  # offered device indices
        st.sets(st.integers(0, 9), max_size=8),  # indices held by running containers
    ),
    min_size=1,
    max_size=4,
)
role_needs = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 3)),  # (replicas, gpu each)
    min_size=1,
    max_size=3,
)


def _can_pack(needs: list[int], free: list[int]) -> bool:
    """Exhaustively: can containers needing ``needs`` GPUs go onto agents with ``free``?"""
    needs = sorted(needs, reverse=True)
    seen: set = set()

    def go(i: int, left: tuple[int, ...]) -> bool:
        if i == len(needs):
            return True
        if (i, left) in seen:
            return False
        seen.add((i, left))
        for j, room in enumerate(left):
            if room >= needs[i]:
                rest = tuple(sorted((*left[:j], room - needs[i], *left[j + 1 :])))
                if go(i + 1, rest):
                    return True
        return False

    return go(0, tuple(sorted(free)))


@settings(max_examples=300, deadline=None)
@given(layout=agent_layouts, needs=role_needs, mode=st.sampled_from(["single-node", "multi-node"]))
def test_property_no_device_twice_and_counts_respected(layout, needs, mode):
    agents = [
        agent(f"a{i}", devices=sorted(d), in_use=sorted(u)) for i, (d, u) in enumerate(layout)
    ]
    roles = [
        {"role": f"r{i}", "replicas": replicas, "resources": {"gpu": gpu}}
        for i, (replicas, gpu) in enumerate(needs)
    ]
    the_spec = spec(roles=roles, mode=mode)
    kernels = expand_kernels(the_spec)
    try:
        plan = planned(the_spec, agents)
    except Pending:
        free = [len(a.free_devices) for a in agents]
        needs = [k.resources.gpu for k in kernels]
        if mode == "single-node":
            assert max(free) < sum(needs)  # refused only when no agent has enough free
        else:
            assert not _can_pack(needs, free)  # refused only when nothing could work
        return
    by_agent = {a.name: a for a in agents}
    given_out: dict[str, list[int]] = {}
    for kernel, handed_out in zip(kernels, plan["kernels"]):
        devices = handed_out["gpu_devices"]
        assert len(devices) == kernel.resources.gpu  # exactly the count asked for
        assert parse_device_label(handed_out["labels"][LABEL_GPU_DEVICES]) == devices
        home = by_agent[handed_out["agent"]]
        assert set(devices) <= set(home.free_devices)  # offered and not held by anyone
        given_out.setdefault(handed_out["agent"], []).extend(devices)
    for name, handed in given_out.items():
        assert len(handed) == len(set(handed)), f"a device of {name} was given twice"
    if mode == "single-node":
        assert len(plan["agents"]) == 1


@settings(max_examples=200, deadline=None)
@given(layout=agent_layouts, gpu=st.integers(0, 3), size=st.integers(1, 6))
def test_property_single_node_is_placed_whenever_one_agent_has_the_devices(layout, gpu, size):
    agents = [
        agent(f"a{i}", devices=sorted(d), in_use=sorted(u)) for i, (d, u) in enumerate(layout)
    ]
    fits = any(len(a.free_devices) >= gpu * size for a in agents)
    try:
        planned(spec(gpu=gpu, size=size), agents)
    except Pending as exc:
        assert not fits, str(exc)
        assert "GPUs asked for" in str(exc) or gpu == 0
        return
    assert fits
