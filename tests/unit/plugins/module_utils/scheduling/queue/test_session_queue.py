"""The queue of PENDING sessions (scheduling/queue/): FIFO per resource
group, a blocked head claims the agents it could use, refused sessions block nobody.

Property tests check, for any queue and agents: nothing started exceeds an agent's
capacity; a session never starts on an agent that a waiting session ahead of it could
use (so the head is never starved); the input's order does not matter; sessions refused
by their owner's limits change nothing for the others."""

from __future__ import annotations

import random

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    OutOfService,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    Waiting,
    could_use,
    ordered,
    schedule,
    take,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
)
from hypothesis import given, settings
from hypothesis import strategies as st

GI = 1024**3


def waiting(
    name,
    size=1,
    cpu=1,
    mem="1g",
    gpu=0,
    at=0.0,
    seq=0,
    mode="single-node",
    group="default",
    owner="u",
):
    raw = {
        "name": name,
        "size": size,
        "mode": mode,
        "resources": {"cpu": cpu, "mem": mem, "gpu": gpu},
    }
    kernels = tuple(expand_kernels(normalize_spec(raw)))
    return Waiting(name, group, mode, kernels, at, seq, owner)


def agent(name, cpu=4, mem_g=8, gpu=0, group="default", used_cpu=0.0):
    return Agent(name, group, cpu, mem_g * GI, gpu, used_cpu)


def starts(decisions):
    return [d.session.name for d in decisions if d.starts]


def test_sessions_start_in_submission_order_while_they_fit():
    queue = [waiting("c", at=3), waiting("a", at=1), waiting("b", at=2)]
    got = schedule(queue, [agent("agent1", cpu=2)])
    assert [d.session.name for d in got] == ["a", "b", "c"]
    assert starts(got) == ["a", "b"]
    assert [d.position for d in got] == [1, 2, 3]
    assert "agent1" in got[2].reason and not got[2].behind


def test_the_sequence_number_breaks_a_tie_of_submission_times():
    got = schedule([waiting("x", at=1, seq=2), waiting("y", at=1, seq=1)], [agent("a", cpu=1)])
    assert starts(got) == ["y"]


def test_a_blocked_head_holds_back_a_smaller_session_on_the_agents_it_could_use():
    queue = [waiting("big", cpu=4, at=1), waiting("small", cpu=1, at=2)]
    got = schedule(queue, [agent("agent1", cpu=4, used_cpu=2)])
    assert starts(got) == []
    assert got[1].behind == ("big",)
    assert got[1].reason.startswith("waits behind big (ahead in the queue")


def test_a_later_session_starts_where_the_head_could_never_run():
    # The head needs 8 CPUs in one container: only agent1 could ever hold it.
    queue = [
        waiting("big", cpu=8, mode="multi-node", at=1),
        waiting("small", cpu=1, mode="multi-node", at=2),
    ]
    agents = [agent("agent1", cpu=8, used_cpu=4), agent("agent2", cpu=4)]
    got = schedule(queue, agents)
    assert starts(got) == ["small"]
    assert got[1].placement.agents == ["agent2"]


def test_a_session_that_can_never_fit_blocks_nobody():
    queue = [waiting("huge", cpu=64, at=1), waiting("small", at=2)]
    got = schedule(queue, [agent("agent1")])
    assert starts(got) == ["small"]
    assert "can never fit" in got[0].reason


def test_a_refused_session_blocks_nobody_and_sees_what_this_pass_started():
    seen = []

    def refuse(session, started):
        seen.append((session.name, [s.name for s in started]))
        return "owner u holds 1 session(s)" if session.owner == "u" and started else ""

    queue = [waiting("a", at=1), waiting("b", at=2), waiting("c", at=3, owner="v")]
    got = schedule(queue, [agent("agent1", cpu=4)], refuse=refuse)
    assert starts(got) == ["a", "c"]
    assert got[1].reason == "owner u holds 1 session(s)"
    assert seen == [("a", []), ("b", ["a"]), ("c", ["a"])]


def test_groups_queue_apart():
    queue = [
        waiting("g1-big", cpu=8, at=1, group="g1"),
        waiting("g2-small", cpu=1, at=2, group="g2"),
    ]
    got = schedule(queue, [agent("a1", group="g1"), agent("a2", group="g2")])
    assert starts(got) == ["g2-small"]
    assert [(d.session.name, d.position) for d in got] == [("g1-big", 1), ("g2-small", 1)]


def test_paused_agents_count_for_nothing_and_are_named():
    away = [OutOfService("agent2", "default", "paused by ops: upgrade")]
    got = schedule([waiting("a", cpu=4)], [agent("agent1", used_cpu=1)], out_of_service=away)
    assert starts(got) == []
    assert "agent2 paused by ops" in got[0].reason


def test_limit_stops_after_so_many_starts():
    queue = [waiting(n, at=i) for i, n in enumerate("abc")]
    got = schedule(queue, [agent("agent1")], limit=1)
    assert [d.session.name for d in got] == ["a"]


def test_gpu_devices_are_not_given_twice_in_one_pass():
    agents = [Agent("g", "default", 8, 16 * GI, 2, gpu_devices=(0, 1))]
    queue = [waiting("a", gpu=1, at=1), waiting("b", gpu=1, at=2), waiting("c", gpu=1, at=3)]
    got = schedule(queue, agents)
    assert starts(got) == ["a", "b"]
    left = take(take(agents, got[0].session, got[0].placement), got[1].session, got[1].placement)
    assert left[0].gpu_in_use == (0, 1)


# --- properties --------------------------------------------------------------------
SHAPES = st.tuples(
    st.integers(1, 3),  # size
    st.sampled_from([0.5, 1, 2, 3, 5]),  # cpu per container
    st.sampled_from(["single-node", "multi-node"]),
    st.sampled_from(["g1", "g2"]),
    st.sampled_from(["u", "v", "w"]),
)


@st.composite
def scenarios(draw):
    cpus = st.sampled_from([2, 4, 8])
    groups = st.sampled_from(["g1", "g2"])
    used = st.sampled_from([0.0, 1.0, 2.0])
    agents = [
        agent(f"a{i}", cpu=draw(cpus), group=draw(groups), used_cpu=draw(used))
        for i in range(draw(st.integers(1, 5)))
    ]
    queue = [
        waiting(
            f"s{i}", size, cpu, "256m", 0, float(draw(st.integers(0, 5))), i, mode, group, owner
        )
        for i, (size, cpu, mode, group, owner) in enumerate(draw(st.lists(SHAPES, max_size=10)))
    ]
    return agents, queue


@settings(max_examples=300)
@given(scenarios())
def test_what_starts_fits_and_nothing_starts_where_a_session_ahead_waits(scenario):
    agents, queue = scenario
    got = schedule(queue, agents)
    free = list(agents)
    waiting_ahead: list = []
    for decision in got:
        if decision.starts:
            used = set(decision.placement.agents)
            for ahead in waiting_ahead:
                if ahead.group == decision.session.group:
                    claimed = {a.name for a in agents if could_use(ahead, a)}
                    assert not used & claimed, (ahead.name, decision.session.name)
            free = take(free, decision.session, decision.placement)
        elif "never fit" not in decision.reason:
            waiting_ahead.append(decision.session)
    for after in free:  # no agent of the generated ones starts overcommitted
        assert after.free.cpu >= -1e-6 and after.free.mem >= 0, after


@settings(max_examples=150)
@given(scenarios(), st.randoms(use_true_random=False))
def test_the_input_order_does_not_matter(scenario, rnd: random.Random):
    agents, queue = scenario
    shuffled = list(queue)
    rnd.shuffle(shuffled)
    assert schedule(shuffled, agents) == schedule(queue, agents)
    assert ordered(shuffled) == ordered(queue)


@settings(max_examples=150)
@given(scenarios())
def test_sessions_refused_by_their_owner_change_nothing_for_the_others(scenario):
    agents, queue = scenario

    def refuse_w(session, _started):
        return "w is over its limit" if session.owner == "w" else ""

    with_w = schedule(queue, agents, refuse=refuse_w)
    without = schedule([s for s in queue if s.owner != "w"], agents)
    assert [d for d in with_w if d.session.owner == "w"] == [
        d for d in with_w if d.reason == "w is over its limit"
    ]
    assert starts(with_w) == starts(without)


@settings(max_examples=150)
@given(st.integers(1, 8), st.integers(1, 12))
def test_equal_sessions_start_as_a_prefix_of_the_queue(cpus, count):
    queue = [waiting(f"s{i}", at=float(i)) for i in range(count)]
    got = schedule(queue, [agent("a", cpu=cpus)])
    assert starts(got) == [f"s{i}" for i in range(min(cpus, count))]


def test_a_thousand_queued_sessions_over_sixty_four_agents_in_one_pass():
    agents = [agent(f"agent{i:02d}", cpu=8, mem_g=32) for i in range(64)]
    queue = [waiting(f"s{i}", size=2, cpu=2, mode="multi-node", at=float(i)) for i in range(1000)]
    got = schedule(queue, agents)
    # 64 agents x 8 CPUs = 512 CPUs: 128 sessions of 2 x 2 CPUs start.
    assert len(starts(got)) == 128 and starts(got) == [f"s{i}" for i in range(128)]
    assert all(d.reason for d in got[128:])
