"""scheduling/queue/queue_order.py (docs/placement.md, "Priority"): the queue by priority, as
the ledger's pass, a create's room and the queue's positions all read it - through
bai_session_ledger run as a module over a real file ledger - and its parts: the policy's
parsing, FIFO with one owner, fair share and explicit priority."""

from __future__ import annotations

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import queue as q
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_state import (
    AgentState,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import priority
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.policies import (
    parse_policies,
    standing,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queue_order import (
    PRIORITY,
    Policies,
    QueueOrder,
    QueuePolicy,
    order_of,
    parse_queue_policy,
)
from hypothesis import given
from hypothesis import strategies as st
from queue_fake import create, ledger_step

BY_PRIORITY = {"queue": {"order": "priority"}}
AGENTS = [{"name": "a1", "group": "default", "resources": None}]


def schedule(path, policies):
    return ledger_step(path, state="scheduled", agents=AGENTS, limit=1, policies=policies)


def with_usage(path, usage):
    """The ledger file at ``path`` with these owners' usage records."""
    book = json.loads(path.read_text())
    book["usage"] = usage
    path.write_text(json.dumps(book))


def queue_of_two(tmp_path, policies, first_owner, second_owner):
    """A session holding 6 of a1's 8 CPUs, then two of 6 CPUs queued behind it, the
    first submitted by ``first_owner``, the second by ``second_owner``; the holder goes."""
    path = tmp_path / "ledger.json"
    hold = create(path, "hold", 6, owner="ops", policies=policies)
    assert hold["action"] == "create", hold
    for name, owner in (("first", first_owner), ("second", second_owner)):
        queued = create(path, name, 6, queue=True, owner=owner, policies=policies)
        assert queued["queued"]["state"] == "PENDING", queued
    gone = ledger_step(
        path, state="absent", name="hold", session_id=hold["reservation"]["session_id"]
    )
    assert gone["changed"], gone
    return path


def test_fifo_when_the_policy_says_so_whatever_the_owners_used(tmp_path):
    fifo = {"queue": {"order": "fifo"}}
    path = queue_of_two(tmp_path, fifo, "heavy", "light")
    with_usage(path, {"heavy": {"units": 1e7, "at": 4e9}})
    passed = schedule(path, fifo)
    assert [s["name"] for s in passed["start"]] == ["first"], passed
    assert [s["name"] for s in passed["queue"]] == ["first", "second"]


def test_priority_is_the_default_order(tmp_path):
    path = queue_of_two(tmp_path, None, "heavy", "light")
    with_usage(path, {"heavy": {"units": 1e7, "at": 4e9}})
    passed = schedule(path, None)
    assert [s["name"] for s in passed["start"]] == ["second"], passed


def test_by_priority_the_lighter_owner_starts_first_and_is_listed_first(tmp_path):
    path = queue_of_two(tmp_path, BY_PRIORITY, "heavy", "light")
    with_usage(path, {"heavy": {"units": 1e7, "at": 4e9}})
    passed = schedule(path, BY_PRIORITY)
    assert [s["name"] for s in passed["start"]] == ["second"], passed
    assert [(s["name"], s["position"]) for s in passed["queue"]] == [("second", 1), ("first", 2)]
    # A read with the same policies lists the queue in the order the pass used.
    read = ledger_step(path, state="read", policies=BY_PRIORITY)
    assert [s["name"] for s in read["queue"]] == ["second", "first"], read


def test_an_owner_s_policy_priority_goes_ahead_of_an_older_session(tmp_path):
    policies = {**BY_PRIORITY, "owners": {"vip": {"priority": 100}}}
    path = queue_of_two(tmp_path, policies, "anyone", "vip")
    passed = schedule(path, policies)
    assert [s["name"] for s in passed["start"]] == ["second"], passed


def test_a_create_does_not_take_what_a_higher_priority_queued_session_waits_for(tmp_path):
    """room() under the same order: a later create of a lower priority waits behind."""
    policies = {**BY_PRIORITY, "owners": {"vip": {"priority": 100}}}
    path = tmp_path / "ledger.json"
    hold = create(path, "hold", 6, owner="ops", policies=policies)
    assert create(path, "vip1", 6, queue=True, owner="vip", policies=policies)["queued"]
    later = create(path, "low", 2, owner="anyone", policies=policies)
    assert later["failed"] and "waits behind vip1" in later["msg"], later
    assert hold["action"] == "create"


def test_usage_is_charged_when_a_session_ends_through_the_module(tmp_path):
    path = tmp_path / "ledger.json"
    made = create(path, "s1", 2, owner="ann")
    sid = made["reservation"]["session_id"]
    assert ledger_step(path, state="ready", name="s1", session_id=sid)["changed"]
    assert ledger_step(path, state="absent", name="s1", session_id=sid)["changed"]
    book = json.loads(path.read_text())
    assert set(book["usage"]) == {"ann"} and book["usage"]["ann"]["units"] >= 0


def test_the_queue_policy_is_checked():
    assert parse_queue_policy(None) == QueuePolicy()
    parsed = parse_queue_policy({"queue": {"order": "priority", "half_life_s": 3600}})
    assert parsed.order == "priority" and parsed.weights.half_life_s == 3600
    assert parse_queue_policy({"queue": {"weight_age": 0}}).weights.age == 0
    for bad, said in (
        ({"order": "lifo"}, "order: got 'lifo'"),
        ({"half_life_s": 0}, "half_life_s: got 0"),
        ({"weight_age": -1}, "weight_age: got -1"),
        ({"weight_age": True}, "weight_age: got True"),
        ({"speed": 1}, r"unknown key\(s\) speed"),
    ):
        with pytest.raises(SpecError, match=said):
            parse_queue_policy({"queue": bad})
    refused = ledger_step_refused({"queue": {"order": "lifo"}})
    assert refused["failed"] and "nothing was changed" in refused["msg"], refused


def ledger_step_refused(policies):
    from ansible_collections.bai.cluster.plugins.modules import bai_session_ledger
    from docker_fake import FakeEngine, run_module

    args = {"state": "scheduled", "path": "/nonexistent/l.json", "policies": policies}
    return run_module(bai_session_ledger, args, FakeEngine())


def test_owners_priority_and_share_are_checked_and_looked_up():
    parsed = parse_policies(
        {"default": {"share": 2}, "owners": {"a": {"priority": 50}, "b": {"share": 0.5}}}
    )
    assert standing(parsed, "a") == (50.0, 2.0)
    assert standing(parsed, "b") == (0.0, 0.5)
    assert standing(parsed, "nobody") == (0.0, 2.0)
    assert standing(parse_policies(None), "x") == (0.0, 1.0)
    for bad in ({"priority": 101}, {"priority": "high"}, {"share": 0}, {"share": True}):
        with pytest.raises(SpecError, match="expected a number"):
            parse_policies({"owners": {"a": bad}})


@given(
    submitted=st.lists(st.floats(0, 1e6), min_size=1, max_size=12),
    heads=st.lists(st.booleans(), min_size=12, max_size=12),
    used=st.floats(0, 1e9),
)
def test_with_one_owner_priority_order_is_fifo(submitted, heads, used):
    ledger = document.Ledger.empty()
    ledger.usage = {"solo": {"units": used, "at": 2e6}}
    queue = [
        q.Waiting(f"s{i}", "default", "multi-node", (), at, seq=i, owner="solo", head=heads[i])
        for i, at in enumerate(submitted)
    ]
    by_priority = order_of(Policies.of(BY_PRIORITY), ledger, 2e6)
    assert q.ordered(queue, by_priority) == q.ordered(queue, q.fifo)


def test_fair_share_moves_a_heavy_owner_back_and_decay_brings_them_forward():
    ledger = document.Ledger.empty()
    # One agent of 8 CPUs and 16 GiB: 12 units a second, about 1e7 over the decay.
    ledger.agents = {
        "a1": document.KeptRead(
            agent=AgentState.from_dict({"name": "a1", "cpu": 8, "mem": 16 * 2**30, "gpu": 0})
        )
    }
    ledger.usage = {"heavy": {"units": 2e6, "at": 0.0}}
    ledger.queue = {
        name: QueueEntry.from_dict(
            {"name": name, "group": "default", "owner": owner, "submitted_at": at, "seq": seq}
        )
        for name, owner, at, seq in (("h", "heavy", 0.0, 1), ("l", "light", 60.0, 2))
    }
    soon = order_of(Policies.of(BY_PRIORITY), ledger, 3600.0)
    keys = sorted(ledger.queue, key=lambda n: q.entry_key(ledger.queue[n], soon))
    assert keys == ["l", "h"]
    assert soon.factors("heavy", 0.0).fairshare < soon.factors("light", 60.0).fairshare == 1.0
    # Ten half-lives on (and the age factor full for both), heavy's use is forgotten:
    # submission order again.
    later = order_of(Policies.of(BY_PRIORITY), ledger, 10 * priority.Weights().half_life_s)
    keys = sorted(ledger.queue, key=lambda n: q.entry_key(ledger.queue[n], later))
    assert keys == ["h", "l"]
    assert isinstance(soon, QueueOrder) and order_of(Policies(), ledger, 0).policy.order == PRIORITY


def test_explain_says_each_factor_and_the_cli_prints_it(tmp_path):
    from bai_cli import api
    from bai_cli.commands.session_text import explain_text

    policies = {**BY_PRIORITY, "owners": {"vip": {"priority": 50}}}
    path = queue_of_two(tmp_path, policies, "heavy", "vip")
    with_usage(path, {"heavy": {"units": 1e7, "at": 4e9}})
    read = ledger_step(path, state="read", name="first", policies=policies)
    queued = read["queued"]
    why = queued["explain"]
    assert (queued["position"], why["order"], why["owner"]) == (2, "priority", "heavy")
    factors = why["factors"]
    assert factors["priority"] == {"value": 0.0, "weight": 1000.0, "points": 0.0}
    assert 0 < factors["fairshare"]["value"] < 0.5 and factors["age"]["value"] < 0.01
    assert why["priority"] == round(sum(f["points"] for f in factors.values()))
    vip = ledger_step(path, state="read", name="second", policies=policies)["queued"]
    assert vip["position"] == 1 and vip["explain"]["factors"]["priority"]["points"] == 500.0
    # What bai-cluster session show/explain receive, and what explain prints.
    details = api.details_from_stats({"name": "first", "containers": [], "queued": queued})
    lines = explain_text(details.pending)
    assert lines[0].startswith("session first is PENDING: number 2 in the queue of resource")
    assert "(order: priority)" in lines[0] and "owner heavy:" in lines[2]
    assert lines[1].startswith(f"  priority {why['priority']} = age ")
    assert "fairshare" in lines[1] and "priority 0.000 x 1000 = 0" in lines[1]
    # With order: fifo, explain says the order is submission order.
    fifo = ledger_step(path, state="read", name="first", policies={"queue": {"order": "fifo"}})[
        "queued"
    ]
    assert fifo["position"] == 1 and fifo["explain"]["order"] == "fifo"
    assert "submission order" in "\n".join(explain_text(fifo))


def test_the_cli_parses_session_explain():
    from bai_cli import __main__ as cli

    args = cli.build_parser().parse_args(["session", "explain", "job1", "--json"])
    assert (args.command, args.action, args.name, args.json) == ("session", "explain", "job1", True)


def test_the_queue_lists_each_session_s_factors_in_the_pass_s_order(tmp_path):
    from bai_cli import __main__ as cli
    from bai_cli.commands.queue import queue_text

    policies = {**BY_PRIORITY, "owners": {"vip": {"priority": 50}}}
    path = queue_of_two(tmp_path, policies, "heavy", "vip")
    with_usage(path, {"heavy": {"units": 1e7, "at": 4e9}})
    rows = ledger_step(path, state="read", policies=policies)["queue"]
    assert [(r["name"], r["position"]) for r in rows] == [("second", 1), ("first", 2)]
    assert rows[0]["explain"]["factors"]["priority"]["points"] == 500.0
    lines = queue_text(rows)
    assert lines[0] == "order: priority; weights: age 1000, fairshare 1000, priority 1000"
    assert lines[1].split() == [
        "GROUP", "#", "NAME", "OWNER", "PRIORITY", "AGE", "FAIRSHARE", "POLICY", "USED", "WAIT",
        "START",
    ]  # fmt: skip
    second, first = lines[2].split(), lines[3].split()
    assert second[:5] == ["default", "1", "second", "vip", str(rows[0]["explain"]["priority"])]
    assert second[7] == "500" and first[2:4] == ["first", "heavy"] and first[7] == "0"
    assert queue_text([]) == ["no queued sessions"]
    args = cli.build_parser().parse_args(["queue", "--owner", "vip", "--json"])
    assert (args.command, args.owner, args.json) == ("queue", "vip", True)


def make(path, name, cpu, policies, *, lifetime=None, queue=False):
    from ansible_collections.bai.cluster.plugins.modules import bai_session_ledger
    from docker_fake import FakeEngine, run_module
    from ledger_fake import fresh_read

    spec = {"name": name, "size": 1, "resources": {"cpu": cpu}, "owner": "u"}
    if lifetime:
        spec["lifetime_s"] = lifetime
    args = {
        "state": "reserved",
        "path": str(path),
        "spec": spec,
        "agents": AGENTS,
        "agent_info": [fresh_read()],
        "queue": queue,
        "policies": policies,
    }
    return run_module(bai_session_ledger, args, FakeEngine())


def test_backfill_starts_a_short_session_ahead_of_a_blocked_one_never_a_long_one(tmp_path):
    """a1 has 8 CPUs; hold takes 6 for an hour; big (8) waits for hold's end, claiming a1.
    With backfill, a session of 2 CPUs that ends within the hour starts beside hold; one
    without a lifetime, or longer than the hour, waits behind big."""
    policies = {"queue": {"backfill": True, "backfill_margin_s": 60}}
    path = tmp_path / "ledger.json"
    assert make(path, "hold", 6, policies, lifetime=3600)["action"] == "create"
    assert make(path, "big", 8, policies, queue=True)["queued"]["position"] == 1
    for name, life in (("forever", None), ("long", 3600)):
        waits = make(path, name, 2, policies, lifetime=life)
        assert waits["failed"] and "waits behind big" in waits["msg"], waits
    short = make(path, "short", 2, policies, lifetime=600)
    assert short["action"] == "create" and short["agents"] == ["a1"], short
    # Without backfill the same create waits its turn.
    plain = tmp_path / "plain.json"
    make(plain, "hold", 6, None, lifetime=3600)
    make(plain, "big", 8, None, queue=True)
    assert "waits behind big" in make(plain, "short", 2, None, lifetime=600)["msg"]


def test_the_scheduler_pass_backfills_a_queued_session(tmp_path):
    """a1 full (hold for an hour, rest without a lifetime); big and short queued. rest
    goes: big still waits for hold's end, and the pass starts short in what rest freed,
    ahead of big; its ticket then starts it."""
    policies = {"queue": {"backfill": True, "backfill_margin_s": 60}}
    path = tmp_path / "ledger.json"
    make(path, "hold", 6, policies, lifetime=3600)
    rest = make(path, "rest", 2, policies)
    make(path, "big", 8, policies, queue=True)
    assert make(path, "short", 2, policies, lifetime=600, queue=True)["queued"]["position"] == 2
    sid = rest["reservation"]["session_id"]
    assert ledger_step(path, state="absent", name="rest", session_id=sid)["changed"]
    passed = schedule(path, policies)
    assert [s["name"] for s in passed["start"]] == ["short"], passed
    started = make(path, "short", 2, policies, lifetime=600, queue=True)
    assert started["queued"]["name"] == "short"  # no ticket: still queued
    from ansible_collections.bai.cluster.plugins.modules import bai_session_ledger
    from docker_fake import FakeEngine, run_module
    from ledger_fake import fresh_read

    spec = {"name": "short", "size": 1, "resources": {"cpu": 2}, "owner": "u", "lifetime_s": 600}
    args = {
        "state": "reserved", "path": str(path), "spec": spec, "agents": AGENTS,
        "agent_info": [fresh_read()], "queue": True, "policies": policies,
        "ticket": passed["start"][0]["ticket"],
    }  # fmt: skip
    made = run_module(bai_session_ledger, args, FakeEngine())
    assert made["action"] == "create" and made["agents"] == ["a1"], made
    with pytest.raises(SpecError, match="backfill: got 'yes'"):
        parse_queue_policy({"queue": {"backfill": "yes"}})


def test_explain_shows_the_pass_s_own_decision_its_claim_earliest_start_and_backfill(tmp_path):
    """The read with the agents runs the scheduler pass dry (schedule.decide): big
    claims a1 and could start when hold's hour is up; forever (no lifetime) may not
    backfill; short would start now ahead of big. Nothing changes in the ledger."""
    from bai_cli.commands.queue import queue_text
    from bai_cli.commands.session_text import explain_text

    policies = {"queue": {"backfill": True, "backfill_margin_s": 60}}
    path = tmp_path / "ledger.json"
    make(path, "hold", 6, policies, lifetime=3600)
    rest = make(path, "rest", 2, policies)
    make(path, "big", 8, policies, queue=True)
    make(path, "forever", 2, policies, queue=True)
    make(path, "short", 2, policies, lifetime=600, queue=True)
    sid = rest["reservation"]["session_id"]
    assert ledger_step(path, state="absent", name="rest", session_id=sid)["changed"]
    before = path.read_text()
    read = ledger_step(path, state="read", agents=AGENTS, policies=policies)
    assert path.read_text() == before and not read["changed"]
    now = {r["name"]: r["explain"]["pass"] for r in read["queue"]}
    assert now["big"]["claims"] == ["a1"] and not now["big"]["starts"]
    # hold's deadline: whole seconds, rounded up (reservations.deadline)
    assert 3500 < now["big"]["earliest_start_in_s"] <= 3601 and now["big"]["no_backfill"] == ""
    assert "no lifetime" in now["forever"]["no_backfill"] and now["forever"]["behind"] == ["big"]
    assert now["short"] == {**now["short"], "starts": True, "agents": ["a1"], "behind": ["big"]}
    # The pass itself decides the same: it starts short.
    assert [s["name"] for s in schedule(path, policies)["start"]] == ["short"]
    lines = explain_text(read["queue"][0])
    assert any(line.startswith("  earliest start: in ") for line in lines), lines
    assert "  it claims a1: nobody behind it starts there" in lines
    text = "\n".join(explain_text(read["queue"][1]))
    assert "no backfill: it has no lifetime" in text, text
    assert "starts it on a1, ahead of big (backfill)" in "\n".join(explain_text(read["queue"][2]))
    table = queue_text(read["queue"])
    assert table[2].split()[-2:] in (["in", "59m"], ["in", "60m"]), table  # big: hold's end
    assert table[4].split()[-1] == "now", table
    # Without the agents the read explains the order only, as before.
    plain = ledger_step(path, state="read", policies=policies)["queue"][0]["explain"]
    assert "pass" not in plain
