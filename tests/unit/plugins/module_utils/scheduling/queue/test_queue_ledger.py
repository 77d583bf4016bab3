"""The queue in the session ledger (docs/placement.md, "The queue"): bai_session_ledger run
as a module over a real file ledger - a create with ``queue`` waits as PENDING in the same
step that would have reserved it, every create places only on what older queued sessions
leave, a scheduler pass (state=scheduled) leases the starts in queue order, only the
create holding the lease starts a queued session, and destroy cancels one. The pure
parts (room, positions, leases) are tested beside them."""

from __future__ import annotations

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import queue as q
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec
from ansible_collections.bai.cluster.plugins.modules import bai_session_ledger
from docker_fake import GI, FakeEngine, run_module
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_fake import fresh_read as read
from ledger_fake import ledger_of
from queue_fake import AGENTS, create, ledger_step


def schedule(path, limit=1):
    return ledger_step(path, state="scheduled", agents=AGENTS, limit=limit)


def stored(path):
    return json.loads(path.read_text())


def test_a_queued_session_starts_in_order_once_the_one_before_it_is_destroyed(tmp_path):
    path = tmp_path / "ledger.json"
    first = create(path, "big1", 6)
    assert first["action"] == "create", first

    # No room now: queued, at once, with its reason and place; the same request again
    # finds it there and changes nothing.
    queued = create(path, "big2", 6, queue=True)
    assert queued["changed"] is True and not queued.get("failed"), queued
    assert queued["queued"]["state"] == "PENDING" and queued["queued"]["position"] == 1
    assert "a1" in queued["queued"]["reason"], queued
    again = create(path, "big2", 6, queue=True)
    assert again["changed"] is False and again["queued"]["position"] == 1
    # Without the queue it is a rerun of the queued request: still PENDING.
    assert create(path, "big2", 6)["queued"]["position"] == 1
    # Another request of that name is refused.
    other = create(path, "big2", 2, queue=True)
    assert other["failed"] and other["conflict"] and "queued" in other["msg"], other

    # 1 CPU would fit beside big1 (2 free), but big2 waits for a1: it waits its turn,
    # with or without the queue.
    behind = create(path, "small", 1)
    assert behind["failed"] and behind["pending"] and not behind["permanent"], behind
    assert "waits behind big2" in behind["msg"], behind
    small = create(path, "small", 1, queue=True)
    assert small["queued"]["position"] == 2 and "big2" in small["queued"]["reason"]

    # Nothing starts while big1 runs.
    assert schedule(path)["start"] == []

    # big1 goes: the pass starts big2 first; small fits beside it, for the next run.
    gone = ledger_step(
        path, state="absent", name="big1", session_id=first["reservation"]["session_id"]
    )
    assert gone["changed"] and gone["waiting"] == 2
    passed = schedule(path)
    assert [s["name"] for s in passed["start"]] == ["big2"] and passed["more"] == 1, passed
    ticket = passed["start"][0]["ticket"]
    assert passed["start"][0]["spec"]["roles"][0]["resources"]["cpu"] == "6"

    # Leased: another pass does not start big2 again, it gives small out.
    second = schedule(path)
    assert [s["name"] for s in second["start"]] == ["small"] and second["more"] == 0

    # A rerun of big2's request (no ticket) does not start it; the ticket does, and it
    # leaves the queue in the step that reserves it.
    assert create(path, "big2", 6, queue=True)["queued"]["name"] == "big2"
    started = create(path, "big2", 6, queue=True, ticket=ticket)
    assert started["action"] == "create" and started["agents"] == ["a1"], started
    book = stored(path)
    assert "big2" in book["sessions"] and list(book["queue"]) == ["small"]
    assert book["sessions"]["big2"]["submitted_at"] == queued["queued"]["submitted_at"]


def test_a_ticketed_start_that_no_longer_fits_stays_queued_in_its_place(tmp_path):
    path = tmp_path / "ledger.json"
    create(path, "hog", 6)
    create(path, "late", 4, queue=True)
    ticket = "forged"
    assert create(path, "late", 4, ticket=ticket)["queued"]["position"] == 1  # no lease
    # A pass that thinks there is room (a kept read from before hog) leases it ...
    book = stored(path)
    book["queue"]["late"]["lease"] = {"ticket": ticket, "until": 1e12}
    path.write_text(json.dumps(book))
    # ... but the start's fresh read says no: queued again, in its place, lease gone.
    kept = create(path, "late", 4, ticket=ticket)
    assert kept["queued"]["position"] == 1 and not kept.get("failed"), kept
    assert "lease" not in stored(path)["queue"]["late"]


def test_destroy_cancels_a_queued_session(tmp_path):
    path = tmp_path / "ledger.json"
    create(path, "hog", 8)
    create(path, "wait", 1, queue=True)
    read_back = ledger_step(path, state="read", name="wait")
    assert read_back["reservation"] is None and read_back["queued"]["position"] == 1
    cancelled = ledger_step(path, state="absent", name="wait")
    assert cancelled["changed"] and cancelled["cancelled"] and cancelled["waiting"] == 0
    assert "queue" not in stored(path)
    assert ledger_step(path, state="read")["queue"] == []


def test_a_name_another_run_is_creating_is_not_queued(tmp_path):
    path = tmp_path / "ledger.json"
    assert create(path, "busy", 1)["action"] == "create"  # its create is still running
    again = create(path, "busy", 1, queue=True)
    assert again["failed"] and "being created by another run" in again["msg"], again
    assert "queue" not in stored(path)


def test_a_session_that_can_never_fit_is_refused_not_queued(tmp_path):
    path = tmp_path / "ledger.json"
    never = create(path, "huge", 64, queue=True)
    assert never["failed"] and never["permanent"], never
    assert not path.exists() or "queue" not in stored(path)


def test_the_owners_limit_queues_a_session_and_names_the_policy(tmp_path):
    path = tmp_path / "ledger.json"
    policies = {"default": {"sessions": 1}}
    assert create(path, "one", 1, owner="alice", policies=policies)["action"] == "create"
    waits = create(path, "two", 1, owner="alice", policies=policies, queue=True)
    assert "default.sessions" in waits["queued"]["reason"], waits
    # Bob is not held back by Alice's limit, nor by her queued session (it claims nothing).
    assert create(path, "bob1", 1, owner="bob", policies=policies)["action"] == "create"
    # Alice's pass: still refused while "one" runs.
    passed = ledger_step(path, state="scheduled", agents=AGENTS, policies=policies)
    assert passed["start"] == [] and "holds 1 session" in passed["queue"][0]["reason"]
    # A lifetime past the owner's longest is refused at once, never queued.
    capped = {"default": {"lifetime_s": 60}}
    spec = {"name": "long", "size": 1, "owner": "carol", "lifetime_s": 120}
    refused = run_module(
        bai_session_ledger,
        {"path": str(path), "spec": spec, "agents": AGENTS, "agent_info": [read()],
         "policies": capped, "queue": True},
        FakeEngine(),
    )  # fmt: skip
    assert refused["failed"] and refused["policy"], refused


# --- pure ------------------------------------------------------------------------------


def waiting(name, cpu, at, group="default"):
    spec = normalize_spec(
        {"name": name, "size": 1, "resources": {"cpu": cpu}, "resource_group": group}
    )
    return q.waiting_of(spec, at, 0)


def agent(name, cpu, used=0.0):
    return Agent(name, "default", cpu, 16 * GI, 0, used)


def test_room_is_what_the_sessions_ahead_leave():
    agents = [agent("a1", 4), agent("a2", 4, used=2.0)]
    head = waiting("head", 3, at=1.0)  # starts on a1
    blocked = waiting("blocked", 8, at=2.0)  # never fits whole, claims nothing
    big = waiting("big", 4, at=3.0)  # waits: claims every agent it could use
    room = q.room([head, blocked, big], waiting("new", 1, at=9.0), agents)
    assert sorted(room.claimed) == ["a1", "a2"] and set(room.claimed.values()) == {"big"}
    assert room.usable() == [] and room.ahead(waiting("new", 1, 9.0)) == ("big",)
    # The head's own turn: nothing ahead of it.
    assert q.room([head, blocked, big], head, agents).usable() == agents


@settings(max_examples=60)
@given(st.lists(st.tuples(st.sampled_from(["g1", "g2"]), st.floats(0, 100)), max_size=12))
def test_positions_count_from_one_in_each_group_in_submission_order(entries):
    ledger = ledger_of(sessions={})
    for i, (group, at) in enumerate(entries):
        spec = normalize_spec({"name": f"s{i}", "size": 1, "resource_group": group})
        q.enqueue(ledger, spec, now=at, reason="")
    places = q.positions(ledger)
    for group in ("g1", "g2"):
        mine = sorted(
            (e for e in q.queue_of(ledger).values() if e.group == group),
            key=lambda e: (e.submitted_at, e.seq),
        )
        assert [places[e.name] for e in mine] == list(range(1, len(mine) + 1))
    assert [w.name for w in q.waiting(ledger)] == [
        w.name for w in q.ordered(q.as_waiting(e) for e in q.queue_of(ledger).values())
    ]


def test_a_lease_gives_the_start_to_its_ticket_until_it_runs_out():
    entry = QueueEntry.from_dict({})
    assert not q.holds_ticket(entry, "t", now=10.0)
    q.lease(entry, "t", now=10.0, lease_s=5)
    assert q.leased(entry, 12.0) and q.holds_ticket(entry, "t", 12.0)
    assert not q.holds_ticket(entry, "other", 12.0) and not q.holds_ticket(entry, None, 12.0)
    assert not q.leased(entry, 15.0) and not q.holds_ticket(entry, "t", 15.0)


@pytest.mark.parametrize("count", [0, 1, 3])
def test_dequeue_drops_the_map_once_empty(count):
    ledger = ledger_of(sessions={})
    for i in range(count):
        q.enqueue(ledger, normalize_spec({"name": f"s{i}", "size": 1}), now=i, reason="")
    for i in range(count):
        assert q.dequeue(ledger, f"s{i}").name == f"s{i}"
    assert "queue" not in ledger.to_dict() and q.dequeue(ledger, "s0") is None
