"""Placement on agents of a resource group (docs/placement.md)."""

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_CPU,
    LABEL_GPU,
    LABEL_MEM,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    used_from_labels,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    OutOfService,
    PlacementRequest,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import Resources
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
)

GI = 1024**3


def kernels_for(size=None, roles=None, cpu=1, mem="1g", gpu=0):
    raw = {
        "name": "job",
        "size": size,
        "roles": roles,
        "resources": {"cpu": cpu, "mem": mem, "gpu": gpu},
    }
    return expand_kernels(normalize_spec(raw))


def agent(name, cpu=4, mem_g=8, gpu=0, group="default", used=(0, 0, 0)):
    return Agent(name, group, cpu, mem_g * GI, gpu, used[0], used[1] * GI, used[2])


def test_agent_free():
    got = agent("a", cpu=4, mem_g=8, gpu=2, used=(1.5, 2, 1)).free
    assert got == Resources(2.5, 6 * GI, 1)


def test_single_node_picks_the_agent_with_most_room_left():
    agents = [agent("agent1", cpu=4), agent("agent2", cpu=8), agent("agent3", cpu=6)]
    got = place(PlacementRequest(kernels_for(3), "single-node", "default"), agents)
    assert got.mode == "single-node"
    assert got.assignment == {"main1": "agent2", "sub1": "agent2", "sub2": "agent2"}
    assert got.agents == ["agent2"]


def test_single_node_ties_break_on_memory_then_name():
    agents = [agent("b", mem_g=8), agent("a", mem_g=8), agent("c", mem_g=16)]
    got = place(PlacementRequest(kernels_for(2), "single-node", "default"), agents)
    assert set(got.assignment.values()) == {"c"}
    agents = [agent("b"), agent("a")]
    got = place(PlacementRequest(kernels_for(2), "single-node", "default"), agents)
    assert set(got.assignment.values()) == {"a"}


def test_single_node_counts_running_containers():
    agents = [agent("agent1", cpu=8, used=(6, 0, 0)), agent("agent2", cpu=4)]
    got = place(PlacementRequest(kernels_for(3), "single-node", "default"), agents)
    assert set(got.assignment.values()) == {"agent2"}


def test_single_node_pending_names_group_and_free_numbers():
    agents = [agent("agent1", cpu=2, used=(0.5, 0, 0)), agent("agent2", cpu=2)]
    with pytest.raises(Pending) as err:
        place(PlacementRequest(kernels_for(3), "single-node", "default"), agents)
    text = str(err.value)
    assert text.startswith("PENDING: ")
    assert "resource group 'default'" in text
    assert "all 3 containers" in text
    assert "agent1: cpu 1.5, mem 8g, gpu 0 free (short of cpu)" in text
    assert "agent2: cpu 2, mem 8g, gpu 0 free (short of cpu)" in text
    assert "use mode multi-node" in text
    assert err.value.permanent  # 3 CPUs never fit on a 2-CPU agent


def test_single_node_beyond_group_capacity_does_not_suggest_multi_node():
    agents = [agent("agent1", cpu=2)]
    with pytest.raises(Pending, match="not even spread") as err:
        place(PlacementRequest(kernels_for(3), "single-node", "default"), agents)
    assert "multi-node" not in str(err.value)
    assert err.value.permanent


def test_single_node_pending_is_temporary_when_capacity_is_only_in_use():
    agents = [agent("agent1", cpu=4, used=(2, 0, 0))]
    with pytest.raises(Pending) as err:
        place(PlacementRequest(kernels_for(3), "single-node", "default"), agents)
    assert not err.value.permanent
    assert "multi-node" not in str(err.value)


def test_multi_node_collapses_to_single_node_when_one_agent_fits():
    agents = [agent("agent1", cpu=2), agent("agent2", cpu=4)]
    got = place(PlacementRequest(kernels_for(4), "multi-node", "default"), agents)
    assert got.mode == "single-node"
    assert set(got.assignment.values()) == {"agent2"}


def test_multi_node_spreads_across_agents():
    agents = [agent("agent1", cpu=2), agent("agent2", cpu=2)]
    got = place(PlacementRequest(kernels_for(4), "multi-node", "default"), agents)
    assert got.mode == "multi-node"
    assert list(got.assignment) == ["main1", "sub1", "sub2", "sub3"]
    assert got.assignment["main1"] == "agent1"
    assert sorted(got.assignment.values()) == ["agent1"] * 2 + ["agent2"] * 2
    assert got.agents == ["agent1", "agent2"]


def test_multi_node_is_all_or_nothing():
    agents = [agent("agent1", cpu=2), agent("agent2", cpu=2, used=(1.5, 0, 0))]
    with pytest.raises(Pending) as err:
        place(PlacementRequest(kernels_for(3), "multi-node", "default"), agents)
    text = str(err.value)
    assert text.startswith("PENDING: the 3 containers (cpu 1, mem 1g, gpu 0 each)")
    assert "agent2: cpu 0.5, mem 8g, gpu 0 free" in text
    assert not err.value.permanent


def test_multi_node_beyond_group_capacity_is_permanent():
    agents = [agent("agent1", cpu=2), agent("agent2", cpu=2)]
    with pytest.raises(Pending, match="can never fit in resource group .default.") as err:
        place(PlacementRequest(kernels_for(5), "multi-node", "default"), agents)
    assert err.value.permanent


def test_multi_node_packs_mixed_roles_when_spreading_fails():
    # Worst fit in kernel order puts "small" on agent2 and leaves no room for "big";
    # biggest-first best fit finds the arrangement that works.
    roles = [
        {"role": "small", "replicas": 1, "resources": {"cpu": 1}},
        {"role": "big", "replicas": 1, "resources": {"cpu": 3}},
    ]
    agents = [agent("agent1", cpu=1), agent("agent2", cpu=3)]
    got = place(PlacementRequest(kernels_for(roles=roles), "multi-node", "default"), agents)
    assert got.assignment == {"small1": "agent1", "big1": "agent2"}
    assert got.mode == "multi-node"


def test_wrong_resource_group():
    agents = [agent("agent1"), agent("gpu1", group="gpu")]
    with pytest.raises(Pending) as err:
        place(PlacementRequest(kernels_for(1), "single-node", "fast"), agents)
    assert str(err.value) == (
        "PENDING: resource group 'fast' has no agents; groups with agents: 'default', 'gpu'"
    )
    assert err.value.permanent


def test_only_agents_of_the_group_are_used():
    agents = [agent("big", cpu=64, group="other"), agent("small", cpu=2)]
    got = place(PlacementRequest(kernels_for(2), "single-node", "default"), agents)
    assert set(got.assignment.values()) == {"small"}


def test_no_agents_at_all():
    with pytest.raises(Pending, match="no agents at all"):
        place(PlacementRequest(kernels_for(1), "single-node", "default"), [])


def test_gpus_are_counted():
    agents = [agent("cpu1", cpu=16), agent("gpu1", cpu=4, gpu=2)]
    got = place(PlacementRequest(kernels_for(2, gpu=1), "single-node", "default"), agents)
    assert set(got.assignment.values()) == {"gpu1"}
    with pytest.raises(Pending, match=r"short of gpu"):
        place(PlacementRequest(kernels_for(3, gpu=1), "single-node", "default"), agents)
    busy = [agent("gpu1", gpu=2, used=(0, 0, 1)), agent("gpu2", gpu=2, used=(0, 0, 1))]
    got = place(PlacementRequest(kernels_for(2, gpu=1), "multi-node", "default"), busy)
    assert got.assignment == {"main1": "gpu1", "sub1": "gpu2"}


def test_memory_is_counted():
    agents = [agent("agent1", cpu=16, mem_g=2)]
    with pytest.raises(Pending, match="short of mem"):
        place(PlacementRequest(kernels_for(3), "single-node", "default"), agents)


def test_kernel_bigger_than_any_agent_can_never_fit():
    agents = [agent("agent1", cpu=4), agent("agent2", cpu=4)]
    with pytest.raises(Pending) as err:
        place(PlacementRequest(kernels_for(2, cpu=6), "multi-node", "default"), agents)
    text = str(err.value)
    assert text.startswith("PENDING: container main1 needs cpu 6")
    assert "can never fit" in text
    assert err.value.permanent


def test_fractional_cpus_fit_exactly():
    agents = [agent("agent1", cpu=0.3)]
    got = place(PlacementRequest(kernels_for(3, cpu=0.1), "single-node", "default"), agents)
    assert len(got.assignment) == 3


def test_bad_mode_and_duplicate_agents():
    with pytest.raises(SpecError, match="mode"):
        place(PlacementRequest(kernels_for(1), "spread", "default"), [agent("a")])
    with pytest.raises(ValueError, match="more than once: a"):
        place(PlacementRequest(kernels_for(1), "single-node", "default"), [agent("a"), agent("a")])


def test_used_from_labels():
    labels = [
        {LABEL_CPU: "1.5", LABEL_MEM: str(GI), LABEL_GPU: "1"},
        {LABEL_CPU: "0.5", LABEL_MEM: str(GI), LABEL_GPU: "0", "other": "x"},
        {"com.example": "not ours"},
        {LABEL_CPU: "2", LABEL_MEM: str(GI)},  # incomplete: skipped
        {LABEL_CPU: "junk", LABEL_MEM: "-5", LABEL_GPU: "nan"},  # unreadable: 0
    ]
    assert used_from_labels(labels) == Resources(2.0, 2 * GI, 1)
    assert used_from_labels([]) == Resources(0.0, 0, 0)


@pytest.mark.parametrize("mode", ["single-node", "multi-node"])
def test_pending_over_many_agents_names_the_roomiest_and_counts_the_rest(mode):
    """A PENDING message over a big group stays readable: the 8 agents with most room,
    then how many more there are (not one entry per agent of 2,000)."""
    agents = [agent(f"a{i:04d}", cpu=4, used=(1 + i % 3, 0, 0)) for i in range(2000)]
    with pytest.raises(Pending) as caught:
        place(PlacementRequest(kernels_for(size=3, cpu=4), mode, "default"), agents)
    text = str(caught.value)
    assert "and 1992 more agent(s) with less room" in text
    assert len(text) < 1500
    assert "a0000: cpu 3" in text  # one of the roomiest (1 CPU in use)
    assert "a0001:" not in text  # 2 CPUs in use: not among the 8 roomiest


def test_placement_over_ten_thousand_agents_is_a_heap_not_a_scan_per_container():
    """Correctness at scale (speed is bench/placement_bench.py's): 64 containers go to
    the 64 agents with most room, one each."""
    agents = [agent(f"a{i:05d}", cpu=16, used=(i % 16, 0, 0)) for i in range(10000)]
    got = place(PlacementRequest(kernels_for(size=64, cpu=4), "multi-node", "default"), agents)
    used = list(got.assignment.values())
    assert len(set(used)) == 64
    assert all(int(name[1:]) % 16 == 0 for name in used)  # nothing in use on those


# --- agents out of service (paused, drained, down: docs/operations.md) -----------------
PAUSED = OutOfService("agent2", "default", "paused by alice at 2026-11-26 09:00:00 UTC: bios")


def test_an_agent_out_of_service_is_never_chosen_in_any_mode():
    # Its room is never counted: placement is given the agents it may use, and the
    # collapse of a multi-node session onto one agent uses only those too.
    usable = [agent("agent1", cpu=4), agent("agent3", cpu=2)]
    for mode in ("single-node", "multi-node"):
        got = place(
            PlacementRequest(kernels_for(2), mode, "default"), usable, out_of_service=[PAUSED]
        )
        assert got.agents == ["agent1"] and got.mode == "single-node"
    got = place(
        PlacementRequest(kernels_for(3, cpu=2), "multi-node", "default"),
        usable,
        out_of_service=[PAUSED],
    )
    assert got.agents == ["agent1", "agent3"]


def test_a_pending_session_names_the_agents_out_of_service_and_can_wait():
    usable = [agent("agent1", cpu=4)]
    with pytest.raises(Pending) as caught:
        place(
            PlacementRequest(kernels_for(3, cpu=2), "multi-node", "default"),
            usable,
            out_of_service=[PAUSED],
        )
    assert caught.value.permanent is False
    assert "not counted, as they take no new sessions: agent2 paused by alice" in str(caught.value)
    assert "agent1: cpu 4" in str(caught.value) and "agent2: cpu" not in str(caught.value)
    # Bigger than any agent in service, but an agent away may be bigger: never "never".
    with pytest.raises(Pending) as caught:
        place(
            PlacementRequest(kernels_for(1, cpu=8), "single-node", "default"),
            usable,
            out_of_service=[PAUSED],
        )
    assert caught.value.permanent is False and "never" not in str(caught.value)


def test_a_group_with_every_agent_out_of_service_waits_and_other_groups_do_not_count():
    with pytest.raises(Pending) as caught:
        place(
            PlacementRequest(kernels_for(1), "single-node", "default"),
            [agent("gpu1", group="gpu")],
            out_of_service=[PAUSED],
        )
    assert "no agent of resource group 'default' is in service" in str(caught.value)
    assert caught.value.permanent is False
    # An agent of another group out of service changes nothing for this one.
    other = OutOfService("gpu2", "gpu", "drained by bob")
    with pytest.raises(Pending) as caught:
        place(
            PlacementRequest(kernels_for(1, cpu=8), "single-node", "default"),
            [agent("agent1")],
            out_of_service=[other],
        )
    assert caught.value.permanent is True and "gpu2" not in str(caught.value)
