"""Preemption (scheduling/queue/preemption.py; docs/placement.md, "Preemption"): the request's
mark, the choice of victims, and the session ledger run as a module over a real file
ledger - a pass that cannot start a queued session of a higher (explicit) priority marks
the preemptible sessions to stop, no second pass stops more meanwhile, the victim's
preempted end queues it again behind what it made room for without charging its owner,
and the next pass starts the session it made room for."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    Waiting,
    preemption,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.backfill import Running
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queue_order import (
    parse_queue_policy,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import JobEnd
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
    spec_canonical,
    spec_hash,
)
from docker_fake import GI
from ledger_fake import ONE_AGENT, ledger_step, reserve

# ops may preempt: its priority is above everyone else's (0).
POLICIES = {"owners": {"ops": {"priority": 50}}}


def batch(name, cpu, owner="u", **more):
    return {
        "name": name,
        "size": 1,
        "resources": {"cpu": cpu},
        "owner": owner,
        "type": "batch",
        "command": "python train.py",
        **more,
    }


def running(path, spec):
    """``spec`` reserved on a1 and confirmed, as if it had run an hour."""
    made = reserve(path, spec, policies=POLICIES)
    assert made["action"] == "create", made
    sid = made["session_id"]
    ledger_step(path, state="ready", name=spec["name"], session_id=sid)
    book = json.loads(path.read_text())
    book["sessions"][spec["name"]]["ready_at"] -= 3600
    path.write_text(json.dumps(book))
    return sid


def queued(path, spec):
    made = reserve(path, spec, queue=True, policies=POLICIES)
    assert made["queued"]["state"] == "PENDING", made
    return made


def schedule(path, policies=None):
    given = POLICIES if policies is None else policies
    return ledger_step(path, state="scheduled", agents=ONE_AGENT, limit=1, policies=given)


def stored(path):
    return json.loads(path.read_text())


# --- the request ------------------------------------------------------------------------


def test_a_preemptible_batch_session_keeps_the_mark_outside_its_hash():
    plain = normalize_spec(batch("job", 1, restarts=1))
    marked = normalize_spec(batch("job", 1, restarts=1, preemptible="yes"))
    assert (plain.preemptible, marked.preemptible) == (False, True)
    assert spec_canonical(marked)["preemptible"] is True
    assert "preemptible" not in spec_canonical(plain)
    assert spec_hash(marked) == spec_hash(plain)
    assert normalize_spec(spec_canonical(marked)) == marked


@pytest.mark.parametrize(
    "given, words",
    [
        ({"preemptible": True}, "only a batch session with restarts"),  # interactive
        ({**batch("job", 1), "preemptible": True}, "only a batch session with restarts"),
        ({**batch("job", 1, restarts=1), "preemptible": "sometimes"}, "expected true or false"),
        ({**batch("job", 1, restarts=1), "preemptible": 2}, "expected true or false"),
    ],
)
def test_a_session_that_could_not_come_back_is_refused_as_preemptible(given, words):
    spec = {"name": "job", "size": 1, **given}
    with pytest.raises(SpecError, match=words):
        normalize_spec(spec)


def test_the_queue_policy_turns_preemption_off_and_bounds_the_warning():
    assert parse_queue_policy({}).preemption is True
    off = parse_queue_policy({"queue": {"preemption": False, "preempt_grace_s": 30}})
    assert (off.preemption, off.preempt_grace_s) == (False, 30.0)
    with pytest.raises(SpecError, match="preempt_grace_s"):
        parse_queue_policy({"queue": {"preempt_grace_s": -1}})
    with pytest.raises(SpecError, match="preemption"):
        parse_queue_policy({"queue": {"preemption": "yes"}})


# --- the choice ---------------------------------------------------------------------------


def victim(name, agent, cpu, priority=0.0, started=0.0):
    return preemption.Victim(
        name, f"id-{name}", "u", priority, started, (Running(agent, cpu, 0, ends_at=0.0),)
    )


def waiting(cpu, size=1, mode="single-node"):
    spec = normalize_spec({"name": "big", "size": size, "mode": mode, "resources": {"cpu": cpu}})
    return Waiting("big", "default", mode, tuple(expand_kernels(spec)), 0.0)


def agent(name, cpu, used):
    return Agent(name, "default", cpu, 64 * GI, 0, used_cpu=used)


def test_the_fewest_victims_lowest_priority_and_latest_started_first():
    agents = [agent("a1", 8, 8)]
    # The order preemption.candidates gives: the lowest priority, then the latest start.
    victims = [
        victim("late", "a1", 2, started=300),
        victim("early", "a1", 2, started=100),
        victim("big-one", "a1", 4, priority=10, started=200),
    ]
    assert [v.name for v in preemption.fewest(waiting(4), agents, victims)] == ["late", "early"]
    # Room for 6: all three at first, then "early" is not needed (2 + 4 = 6), so the one
    # started first keeps running.
    assert [v.name for v in preemption.fewest(waiting(6), agents, victims)] == [
        "late",
        "big-one",
    ]
    assert preemption.fewest(waiting(9), agents, victims) == []


def test_victims_on_another_agent_than_the_room_needed_are_left_alone():
    agents = [agent("a1", 8, 6), agent("a2", 8, 8)]
    # "there" comes first (started last) but frees too little on a2: dropped again.
    victims = [victim("there", "a2", 2, started=500), victim("here", "a1", 2)]
    assert [v.name for v in preemption.fewest(waiting(4), agents, victims)] == ["here"]


def test_a_gang_that_asks_for_a_rack_stops_only_sessions_of_the_rack_it_then_fits():
    """Room freed across racks does not make a rack gang fit: the victims chosen free one
    rack, or nobody is stopped."""
    racks = {"a1": "r1", "a2": "r1", "a3": "r2"}
    agents = [replace(agent(name, 4, 4), labels=(("rack", rack),)) for name, rack in racks.items()]
    gang = replace(waiting(2, size=4, mode="multi-node"), topology="rack")
    # The latest started first: "r2" alone frees room for two members in rack r2 only.
    victims = [victim("r2", "a3", 4, started=900), victim("r1a", "a1", 4), victim("r1b", "a2", 4)]
    assert [v.name for v in preemption.fewest(gang, agents, victims)] == ["r1a", "r1b"]
    # Only one session per rack may be stopped: no rack frees room for four members.
    assert preemption.fewest(gang, agents, [victims[0], victims[1]]) == []


# --- the ledger ---------------------------------------------------------------------------


def test_a_pass_preempts_for_a_higher_priority_and_the_victim_comes_back_behind_it(tmp_path):
    path = tmp_path / "ledger.json"
    low = running(path, batch("low", 6, restarts=1, preemptible=True, end_signal="USR1@30"))
    queued(path, batch("high", 6, owner="ops"))

    passed = schedule(path)
    assert passed["start"] == [], passed
    want = {"session": "high", "victims": ["low"]}
    assert {k: passed["preempt"][k] for k in want} == want, passed
    assert "priority 50 over 0" in passed["preempt"]["reason"]
    # Its end signal first, for its lead (within preempt_grace_s).
    assert passed["preempt"]["lead_s"] == 30
    assert [(r["session"], r["signal"]) for r in passed["preempt"]["rows"]] == [("low", "USR1")]
    book = stored(path)
    assert book["sessions"]["low"][preemption.MARK]["session"] == "high"
    assert book["queue"]["high"][preemption.QUEUED_MARK]["victims"] == ["low"]
    # One preemption at a time: the next pass, before the victim is gone, stops nothing.
    assert schedule(path)["preempt"] == {}

    # session_schedule.yml warns it and destroys it. Its command saved a checkpoint on
    # the warning and exited 0: preempted all the same, it queues again, uncharged.
    at = book["sessions"]["low"][preemption.MARK]["at"]
    ended = {"state": "succeeded", "exit_code": 0, "started": 1.0, "ended": at + 1, "members": {}}
    gone = ledger_step(path, state="absent", name="low", session_id=low, ended=ended)
    assert gone["restarted"]["reason"].endswith("preempted for high"), gone
    book = stored(path)
    assert "u" not in (book.get("usage") or {}), book.get("usage")
    again = book["queue"]["low"]
    assert (again["head"], again["attempt"]) == (False, 1)
    assert again["attempts"][0]["restarted_because"] == "preempted for high"
    assert (again["attempts"][0]["state"], again["attempts"][0]["exit_code"]) == ("preempted", 0)

    # The next pass starts what it made room for, not the victim.
    (start,) = schedule(path)["start"]
    assert start["name"] == "high"


def test_a_pass_that_preempts_counts_the_session_it_frees_room_for_as_one_more(tmp_path):
    # session_schedule.yml destroys the victims and stops: the next run starts the
    # session, and more says there is one (bai-cluster session schedule runs it at once).
    path = tmp_path / "ledger.json"
    running(path, batch("low", 6, restarts=1, preemptible=True))
    queued(path, batch("high", 6, owner="ops"))
    passed = schedule(path)
    assert (passed["start"], passed["preempt"]["session"], passed["more"]) == ([], "high", 1)
    # Without a preemption nothing is counted.
    assert (schedule(path)["preempt"], schedule(path)["more"]) == ({}, 0)


MARKED = Reservation.from_dict(
    {"session_id": "s1", preemption.MARK: {"session": "high", "at": 100.0}}
)


@pytest.mark.parametrize(
    "ended, state",
    [
        ({"state": "succeeded", "ended": 101.0}, "preempted"),  # exited once warned
        ({"state": "failed", "ended": 100.0, "signal": "SIGUSR1"}, "preempted"),  # killed by it
        ({"state": "cancelled", "ended": 101.0}, "cancelled"),  # a destroy by hand
        ({"state": "succeeded", "ended": 99.0}, "succeeded"),  # it was done before the mark
        ({"state": "lost", "ended": 101.0}, "lost"),
        ({"state": "timeout", "ended": 101.0}, "timeout"),
    ],
)
def test_a_marked_victim_s_end_after_the_mark_is_preempted(ended, state):
    end = JobEnd.of(ended)
    got = preemption.victim_end(MARKED, end, "s1")
    assert got is not None and got.state == state, got
    if state == "preempted":
        assert got.reason == "preempted for high" and got.ended == ended["ended"]
    # Unmarked, or another instance of the name: as given.
    assert preemption.victim_end(Reservation.from_dict({"session_id": "s1"}), end, "s1") == end
    assert preemption.victim_end(MARKED, end, "s2") == end


def test_a_failed_attempt_is_charged_where_a_preempted_one_is_not(tmp_path):
    path = tmp_path / "ledger.json"
    sid = running(path, batch("low", 6, restarts=1, preemptible=True))
    ended = {"state": "failed", "exit_code": 137, "signal": "SIGKILL", "members": {}}
    ledger_step(path, state="absent", name="low", session_id=sid, ended=ended)
    assert stored(path)["usage"]["u"]["units"] > 3000  # an hour of 6 CPUs, decayed a little


@pytest.mark.parametrize(
    "low_spec, high_owner, policies",
    [
        (batch("low", 6, restarts=1), "ops", POLICIES),  # not preemptible
        (batch("low", 6, restarts=1, preemptible=True), "u2", POLICIES),  # no higher priority
        (
            batch("low", 6, restarts=1, preemptible=True),
            "ops",
            {"owners": {"ops": {"priority": 50}, "u": {"priority": 50}}},
        ),
        (
            batch("low", 6, restarts=1, preemptible=True),
            "ops",
            {**POLICIES, "queue": {"preemption": False}},
        ),
    ],
    ids=["not-preemptible", "same-priority", "equal-explicit", "turned-off"],
)
def test_nothing_is_preempted_without_a_mark_a_higher_priority_or_the_policy(
    tmp_path, low_spec, high_owner, policies
):
    path = tmp_path / "ledger.json"
    running(path, low_spec)
    queued(path, batch("high", 6, owner=high_owner))
    passed = schedule(path, policies)
    assert (passed["start"], passed["preempt"]) == ([], {}), passed
    assert preemption.MARK not in stored(path)["sessions"]["low"]


def test_a_session_with_no_restart_left_is_not_preempted(tmp_path):
    path = tmp_path / "ledger.json"
    running(path, batch("low", 6, restarts=1, preemptible=True))
    book = stored(path)
    book["sessions"]["low"]["attempt"] = 1  # it has restarted once already
    path.write_text(json.dumps(book))
    queued(path, batch("high", 6, owner="ops"))
    assert schedule(path)["preempt"] == {}


def test_a_session_that_would_not_fit_even_then_preempts_nobody(tmp_path):
    path = tmp_path / "ledger.json"
    running(path, batch("low", 2, restarts=1, preemptible=True))
    running(path, batch("keep", 4))
    queued(path, batch("high", 6, owner="ops"))
    assert schedule(path)["preempt"] == {}
