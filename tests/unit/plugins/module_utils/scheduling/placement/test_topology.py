"""The topology rule (module_utils/scheduling/placement/topology.py): a request that
names a level has every member inside one domain of it (one rack), the tightest that
fits, or waits with what each domain lacks; one that names none is not narrowed."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_RESOURCES,
    WAIT_TOPOLOGY,
    Pending,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    PlacementRequest,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    constraints_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.topology import (
    TOPOLOGY,
    check_tree,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queued import Waiting
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.scheduler import (
    schedule,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    widening,
)
from hypothesis import given, settings
from hypothesis import strategies as st

GI = 1024**3


def agent(name, rack=None, cpu=4, used=0.0):
    labels = (("rack", rack),) if rack else ()
    return Agent(name, "default", float(cpu), 64 * GI, 0, used_cpu=float(used), labels=labels)


def request(size, cpu=1, level="rack", mode="multi-node"):
    spec = normalize_spec(
        {"name": "job", "size": size, "mode": mode, "resources": {"cpu": cpu, "mem": "1g"}}
    )
    constraints = ((TOPOLOGY, level),) if level else ()
    return PlacementRequest(tuple(expand_kernels(spec)), mode, "default", constraints)


def racks_of(placement, agents):
    by_name = {a.name: a for a in agents}
    return {by_name[name].label("rack") for name in placement.agents}


def test_a_gang_that_asks_for_a_rack_stays_in_one_where_unconstrained_it_would_spread():
    agents = [agent("a1", "r1", cpu=2), agent("a2", "r2", cpu=2), agent("a3", "r2", cpu=2)]
    spread = place(request(3, level=None), agents)
    assert len(racks_of(spread, agents)) == 2  # today's placement: across racks
    kept = place(request(3), agents)
    assert racks_of(kept, agents) == {"r2"} and sorted(kept.agents) == ["a2", "a3"]


def test_the_tightest_rack_that_fits_is_taken_so_the_roomier_one_stays_whole():
    agents = [
        agent("big1", "big", cpu=8),
        agent("big2", "big", cpu=8),
        agent("small1", "small", cpu=2),
        agent("small2", "small", cpu=2),
    ]
    got = place(request(4), agents)
    assert racks_of(got, agents) == {"small"}
    # Once the small rack is busy, the same gang goes to the big one.
    busy = [*agents[:2], agent("small1", "small", cpu=2, used=2), agents[3]]
    assert racks_of(place(request(4), busy), busy) == {"big"}


def test_a_gang_no_rack_can_hold_waits_and_says_what_each_rack_lacks():
    agents = [agent("a1", "r1", cpu=2), agent("a2", "r2", cpu=2), agent("a3", "r3", cpu=1)]
    with pytest.raises(Pending) as caught:
        place(request(3), agents)
    text = str(caught.value)
    # What each rack holds of the gang, roomiest first, and what the roomiest lacks.
    assert (
        "needs its 3 containers in one rack; room now for 2 in rack r1, 2 in rack r2, "
        "1 in rack r3 (rack r1: the 3 containers"
    ) in text, text
    assert "it can never fit in rack r1" in text
    assert caught.value.permanent  # no rack is big enough, even empty
    # The three racks together have room: it waits for topology, not for resources.
    assert caught.value.kind == WAIT_TOPOLOGY
    # A rack that is busy now but big enough: waiting helps.
    busy = [agent("a1", "r1", cpu=4, used=3), agent("a2", "r2", cpu=2)]
    with pytest.raises(Pending, match="room now for 2 in rack r2, 1 in rack r1 ") as caught:
        place(request(3), busy)
    assert not caught.value.permanent
    assert caught.value.kind == WAIT_TOPOLOGY
    # Nor do the racks together have room: it waits for resources.
    full = [agent("a1", "r1", cpu=4, used=3), agent("a2", "r2", cpu=2, used=1)]
    with pytest.raises(Pending, match="room now for 1 in rack r1, 1 in rack r2 ") as caught:
        place(request(3), full)
    assert caught.value.kind == WAIT_RESOURCES


def test_agents_without_the_level_are_never_used_and_none_at_all_is_said():
    agents = [agent("plain1", cpu=8), agent("a1", "r1", cpu=2)]
    got = place(request(2), agents)
    assert got.agents == ["a1"]
    with pytest.raises(Pending, match="no agent in service has a 'block' topology label"):
        place(request(1, level="block"), agents)


def test_a_single_node_session_with_a_level_lands_on_one_agent_of_a_labelled_domain():
    agents = [agent("plain", cpu=8), agent("a1", "r1", cpu=4)]
    got = place(request(2, cpu=2, mode="single-node"), agents)
    assert got.agents == ["a1"]


def _exists_in_one_rack(size, cpu, agents):
    """Exhaustive: some rack whose agents' whole free CPUs hold SIZE kernels of CPU."""
    racks = {a.label("rack") for a in agents if a.label("rack")}
    for rack in racks:
        members = [a for a in agents if a.label("rack") == rack]
        for choice in itertools.product(members, repeat=size):
            use: dict[str, float] = {}
            for a in choice:
                use[a.name] = use.get(a.name, 0.0) + cpu
            if all(use[a.name] <= a.free.cpu + 1e-9 for a in members if a.name in use):
                return True
    return False


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["r1", "r2", "r3", None]), st.integers(0, 4), st.integers(0, 4)),
        min_size=1,
        max_size=5,
    ),
    st.integers(1, 4),
    st.sampled_from([1, 2]),
)
def test_a_required_placement_never_spans_racks_and_exists_exactly_when_one_does(trees, size, cpu):
    agents = [
        agent(f"a{i}", rack, cpu=total, used=min(used, total))
        for i, (rack, total, used) in enumerate(trees)
    ]
    try:
        got = place(request(size, cpu=cpu), agents)
    except Pending:
        got = None
    if got is not None:
        assert len(racks_of(got, agents)) == 1 and None not in racks_of(got, agents)
        assert len(got.assignment) == size
    assert (got is not None) == _exists_in_one_rack(size, cpu, agents)


# --- the operator's tree (check_tree) -------------------------------------------------
LEVELS = ["block", "rack"]
TREE = {
    "a1": {"block": "b1", "rack": "r1"},
    "a2": {"block": "b1", "rack": "r2"},
    "a3": {"rack": "r3", "block": "b2"},  # the mapping's order does not matter
}


def test_a_tree_gives_each_agent_its_domains_widest_first():
    got = check_tree(LEVELS, TREE)
    assert got["a3"] == (("block", "b2"), ("rack", "r3"))
    assert set(got) == set(TREE)
    assert check_tree([], {"a1": None, "a2": {}}) == {}  # no levels, no topology


@pytest.mark.parametrize(
    ("levels", "tree", "says"),
    [
        (["block", "rack", "row", "pod"], TREE, "give 1 to 3 distinct levels"),
        (["rack", "rack"], TREE, "give 1 to 3 distinct levels"),
        (["Rack"], TREE, "'Rack' is not a level name"),
        (LEVELS, {**TREE, "a4": {"block": "b2"}}, "a4: bai_topology has no rack"),
        (LEVELS, {**TREE, "a4": {"block": "b2", "rack": " "}}, "a4: bai_topology has no rack"),
        (
            LEVELS,
            {**TREE, "a4": {"block": "b2", "rack": "r4", "row": "x"}},
            "a4: bai_topology has unknown level(s) row",
        ),
        (LEVELS, {**TREE, "a4": None}, "a4: bai_topology must map each level"),
        (LEVELS, {**TREE, "a4": {"block": "b2", "rack": "r1"}}, "rack r1 is in block"),
        ([], {"a1": {"rack": "r1"}}, "a1: bai_topology is set but bai_topology_levels is not"),
    ],
)
def test_a_wrong_tree_is_refused_naming_the_agent_and_what_to_change(levels, tree, says):
    with pytest.raises(SpecError) as caught:
        check_tree(levels, tree)
    assert says in str(caught.value)


def test_a_waiting_gang_claims_only_agents_of_its_level_so_others_start_elsewhere():
    """The queue's claims (queue/scheduler.py: could_use): a gang that waits for a rack
    claims the agents with a rack, never the unlabelled one it could not use, so the
    session behind it starts there."""
    head = request(3)
    behind = request(1, level=None)
    queue = [
        Waiting("gang", "default", "multi-node", head.kernels, 1.0, 1, topology="rack"),
        Waiting("small", "default", "multi-node", behind.kernels, 2.0, 2),
    ]
    agents = [agent("a1", "r1", cpu=4, used=2), agent("plain", cpu=4)]
    gang, small = schedule(queue, agents)
    assert not gang.starts and gang.claims == ("a1",), gang
    assert small.starts and small.placement.agents == ["plain"]


def widened(size, level, first, cpu=1):
    """A preferred request for one rack after its wait: it keeps to ``level`` now and
    tries the domains of ``first`` before."""
    spec = normalize_spec(
        {"name": "job", "size": size, "mode": "multi-node", "resources": {"cpu": cpu, "mem": "1g"}}
    )
    kernels = tuple(expand_kernels(spec))
    return PlacementRequest(kernels, "multi-node", "default", constraints_of(level, first))


def test_a_widened_request_still_lands_in_one_rack_when_one_has_room():
    agents = [
        agent("a1", "r1", cpu=2),
        agent("a2", "r2", cpu=2),
        agent("a3", "r2", cpu=2),
        agent("plain", cpu=8),
    ]
    # Widened to any agents: one rack (r2) holds it, so there, not on the roomiest agent.
    got = place(widened(3, "", ("rack",)), agents)
    assert racks_of(got, agents) == {"r2"}
    # No rack holds five: then any agents, as an unconstrained request.
    assert place(widened(5, "", ("rack",)), agents).agents == ["plain"]


def test_a_widened_request_says_what_the_level_it_keeps_to_lacks():
    agents = [agent(f"a{i}", f"r{i}", cpu=2) for i in range(4)]
    blocks = {"r0": "b0", "r1": "b0", "r2": "b1", "r3": "b1"}
    agents = [replace(a, labels=(*a.labels, ("block", blocks[a.label("rack")]))) for a in agents]
    with pytest.raises(Pending) as caught:
        place(widened(5, "block", ("rack",)), agents)
    # The blocks are named (what it keeps to now), not the racks it tried first.
    assert "needs its 5 containers in one block; room now for 4 in block b0" in str(caught.value)
    assert "in rack" not in str(caught.value).split("(", maxsplit=1)[0]


def test_widening_names_the_levels_a_widened_request_tries_first():
    levels = ("block", "rack")
    assert widening("rack", 20, 10, levels) == ("rack", ())
    assert widening("rack", 20, 25, levels) == ("block", ("rack",))
    assert widening("rack", 20, 45, levels) == ("", ("rack", "block"))
    assert widening("block", 20, 25, levels) == ("", ("block",))
    assert widening("rack", 0, 999, levels) == ("rack", ())


def test_a_gang_starting_again_goes_back_to_its_rack_when_it_fits():
    """A restart (steps/restarts.py) asks for the domain of its last attempt first: the
    roomier rack would otherwise be the tightest-first order's second choice only by
    luck, and the gang would move."""
    agents = [
        agent("a1", "r1", cpu=4, used=1),
        agent("a2", "r1", cpu=4, used=1),
        agent("b1", "r2", cpu=4, used=2),
        agent("b2", "r2", cpu=4, used=2),
    ]
    spec = normalize_spec(
        {"name": "job", "size": 3, "mode": "multi-node", "resources": {"cpu": 1, "mem": "1g"}}
    )
    kernels = tuple(expand_kernels(spec))
    fresh = PlacementRequest(kernels, "multi-node", "default", constraints_of("rack"))
    assert racks_of(place(fresh, agents), agents) == {"r2"}  # the tightest that holds it
    again = constraints_of("rack", (), ("a2", "gone-agent"))
    back = place(PlacementRequest(kernels, "multi-node", "default", again), agents)
    assert racks_of(back, agents) == {"r1"}
    # Its rack full now: the next that holds it, as for any gang.
    full = [replace(a, used_cpu=4.0) if a.label("rack") == "r1" else a for a in agents]
    moved = place(PlacementRequest(kernels, "multi-node", "default", again), full)
    assert racks_of(moved, full) == {"r2"}
    # Without a level the agents of its last attempt change nothing.
    assert constraints_of("", (), ("a2",)) == ()
