"""Agent availability: the records, the admission rule, placement around paused agents
(bai_session_ledger run as a module over a real file ledger), the agents' view, and the
destroy of the sessions a drain leaves."""

from __future__ import annotations

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.containers import destroy
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_view
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    availability as avail,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document, roster
from ansible_collections.bai.cluster.plugins.modules import (
    bai_agent_availability,
    bai_session_ledger,
)
from availability_fake import ledger_args, pause_in_ledger, read
from docker_fake import GI, FakeEngine, run_module


def record(availability="pause", name="a1", identity="n1", by="alice", reason="", now=100.0):
    return avail.make_record(
        availability, name=name, identity=identity, by=by, reason=reason, now=now
    )


# --- records --------------------------------------------------------------------------
def test_a_pause_is_recorded_once_with_who_why_and_when():
    ledger = document.empty()
    assert avail.set_availability(ledger, record(reason="driver"), name="a1", identity="n1")
    # Pausing again keeps the first record: who and when do not move.
    again = record(by="bob", now=200.0)
    assert not avail.set_availability(ledger, again, name="a1", identity="n1")
    kept = avail.records(ledger)["n1"]
    assert (kept.by, kept.at, kept.reason) == ("alice", 100.0, "driver")
    assert avail.describe(kept) == "paused by alice at 1970-01-01 00:01:40 UTC: driver"
    # A drain is a new record.
    assert avail.set_availability(ledger, record("drain", by="bob"), name="a1", identity="n1")
    assert avail.records(ledger)["n1"].by == "bob"
    assert avail.set_availability(ledger, None, name="a1", identity="n1")
    assert avail.records(ledger) == {}
    assert not avail.set_availability(ledger, None, name="a1", identity="n1")


def test_a_record_made_before_the_identity_was_known_moves_to_it():
    ledger = document.empty()
    avail.set_availability(ledger, record(identity=""), name="a1", identity="")
    assert avail.record_of(avail.records(ledger), "a1", "n1") is not None
    avail.set_availability(ledger, record(), name="a1", identity="n1")
    assert list(avail.records(ledger)) == ["n1"]


def test_placement_passes_over_paused_drained_and_down_agents_only():
    paused = {"n1": record()}
    assert avail.unavailable("a1", "n1", paused, None).startswith("paused by alice")
    assert avail.unavailable("other-name", "n1", paused, None)  # the identity decides
    assert avail.unavailable("a2", "n2", paused, None) == ""
    drained_by_hand = swarm_node(availability="drain", usable=False, state="ready")
    assert "not by this toolkit" in avail.unavailable("a2", "n2", {}, drained_by_hand)
    down = swarm_node(availability="active", usable=False, state="down")
    assert avail.unavailable("a2", "n2", {}, down) == "down in the swarm"
    up = swarm_node(availability="active", usable=True, state="ready")
    assert avail.unavailable("a2", "n2", {}, up) == ""


def swarm_node(**row) -> roster.SwarmNode:
    return roster.SwarmNode(**{"id": "n2", "hostname": "a2", "cpu": 4.0, "mem": GI, **row})


def test_a_paused_agent_admits_only_sessions_already_there():
    assert avail.admits(None, session_there=False) == ""
    assert "takes no new sessions" in avail.admits(record(), session_there=False)
    assert avail.admits(record(), session_there=True) == ""


def test_the_agent_s_own_record_round_trips_and_a_damaged_one_admits_nothing(tmp_path):
    assert avail.read_marker(str(tmp_path)) == {}
    avail.write_marker(str(tmp_path), {"": record()})
    assert avail.read_marker(str(tmp_path))[""].by == "alice"
    assert (tmp_path / avail.MARKER).stat().st_mode & 0o077 == 0
    (tmp_path / avail.MARKER).write_text("[1]")
    with pytest.raises(ValueError, match="damaged"):
        avail.read_marker(str(tmp_path))


def test_a_swarm_node_is_updated_only_when_its_availability_differs():
    node = {"Spec": {"Role": "worker", "Availability": "active", "Labels": {"x": "1"}}}
    assert avail.node_spec(node, "active") is None
    assert avail.node_spec(node, "pause") == {
        "Role": "worker",
        "Availability": "pause",
        "Labels": {"x": "1"},
    }


def test_single_node_goes_to_the_other_agent_and_multi_node_waits_naming_the_paused_one(
    tmp_path,
):
    path = tmp_path / "ledger.json"
    paused = pause_in_ledger(path, "a2")
    assert paused["changed"] is True and paused["record"]["by"] == "alice"
    assert paused["node"] is None  # a file ledger: no swarm node

    placed = run_module(bai_session_ledger, ledger_args(path, "s1"), FakeEngine())
    assert placed["agents"] == ["a1"] and placed["unavailable"] == ["a2"], placed

    # 2 x 2 CPUs each do not fit beside s1 on a1 (4 CPUs): PENDING, and it says why.
    spread = ledger_args(path, "s2", size=2, mode="multi-node")
    pending = run_module(bai_session_ledger, spread, FakeEngine())
    assert pending["failed"] and pending["pending"], pending
    assert "a2 paused by alice" in pending["msg"] and "upgrade" in pending["msg"]
    assert pending["permanent"] is False and pending["unavailable"] == ["a2"]
    # The paused agent's room is not counted as free.
    assert "a2: cpu" not in pending["msg"]

    pause_in_ledger(path, "a2", "active")
    placed = run_module(bai_session_ledger, spread, FakeEngine())
    assert placed["agents"] == ["a2"] or set(placed["agents"]) == {"a1", "a2"}, placed


def test_every_agent_paused_is_a_pending_that_can_end(tmp_path):
    path = tmp_path / "ledger.json"
    pause_in_ledger(path, "a1", "drain")
    pause_in_ledger(path, "a2")
    pending = run_module(bai_session_ledger, ledger_args(path, "s1"), FakeEngine())
    assert pending["pending"] and pending["permanent"] is False, pending
    assert "a1 drained by alice" in pending["msg"] and "a2 paused" in pending["msg"]


def test_an_agent_whose_own_record_says_paused_is_passed_over(tmp_path):
    # The pause reached the agent but not yet the ledger (it is written first).
    reads = [read("a1", own=record(name="a1", identity="id-a1").to_dict()), read("a2")]
    args = ledger_args(tmp_path / "ledger.json", "s1", reads=reads)
    placed = run_module(bai_session_ledger, args, FakeEngine())
    assert placed["agents"] == ["a2"] and placed["unavailable"] == ["a1"], placed


def test_the_cluster_read_lists_records_and_what_the_ledger_gives_out(tmp_path):
    path = tmp_path / "ledger.json"
    pause_in_ledger(path, "a2")
    run_module(bai_session_ledger, ledger_args(path, "s1"), FakeEngine())
    found = run_module(
        bai_agent_availability, {"scope": "cluster", "path": str(path)}, FakeEngine()
    )
    assert found["changed"] is False and list(found["records"]) == ["id-a2"]
    assert found["given_out"]["a1"]["sessions"] == ["s1"]
    assert found["given_out"]["a1"]["cpu"] == 2.0
    assert json.loads(path.read_text())["availability"]["id-a2"]["reason"] == "upgrade"


# --- the agents' view -----------------------------------------------------------------
def test_agent_rows_count_only_agents_in_service_as_free():
    reads = {
        "a1": {**read("a1"), "sessions": {"x": {"name": "s1"}}},
        "a2": read("a2"),
        "a3": {"unreachable": True, "msg": "ssh: connect to host a3: No route"},
    }
    reads["a1"]["agent"].update(used_cpu=1.0, used_mem=GI)
    cluster = {
        "records": {"id-a2": record(name="a2", identity="id-a2").to_dict()},
        "given_out": {"a3": {"cpu": 2.0, "mem": GI, "gpu_devices": [], "sessions": ["s9"]}},
        "agents": {"a3": {"agent": {"id": "id-a3", "cpu": 8, "mem": 8 * GI}}},
    }
    declared = [{"name": n, "group": "default"} for n in ("a3", "a2", "a1")]
    rows = agent_view.rows(declared, reads, cluster)
    assert [r["name"] for r in rows] == ["a1", "a2", "a3"]
    a1, a2, a3 = rows
    assert a1["in_service"] and a1["sessions"] == ["s1"] and a1["source"] == "engine"
    assert a2["availability"] == "pause" and not a2["in_service"]
    assert a3["health"].startswith("unreachable") and a3["source"] == "ledger"
    assert a3["sessions"] == ["s9"] and a3["id"] == "id-a3"
    sums = agent_view.totals(rows)
    assert sums["free"]["cpu"] == 3.0  # a1 only: a2 is paused, a3 does not answer
    assert sums["offered"]["cpu"] == 16.0 and sums["in_service"] == 1
    lines = agent_view.table(rows)
    assert lines[0].split()[:5] == ["AGENT", "ID", "GROUP", "AVAILABILITY", "HEALTH"]
    assert lines[1].split()[:2] == ["a1", "id-a1"]
    assert any(line.startswith("a2: paused by alice") for line in lines)
    assert "(ledger)" in lines[3]
    assert agent_view.details(a2)[2] == f"availability: {a2['availability_text']}"


def test_a_node_drained_by_hand_shows_as_drained():
    nodes = {"id-a1": {"id": "id-a1", "hostname": "h", "state": "down", "availability": "drain"}}
    (row,) = agent_view.rows([{"name": "a1"}], {"a1": read("a1")}, {"nodes": nodes})
    assert row["availability"] == "drain" and row["health"] == "swarm node down"


# --- destroying several sessions ------------------------------------------------------
def test_a_destroy_of_several_sessions_releases_only_those_reached_everywhere():
    entries = [
        {"item": "s1", "reservation": {"session_id": "i1"}, "holders": ["a1"]},
        {"item": "s2", "reservation": {"session_id": "i2"}, "holders": ["a1", "a2"]},
        {"item": "s3", "reservation": None, "holders": []},
        {"item": "s4", "reservation": {"session_id": "i4"}, "holders": ["gone"]},
    ]
    plan = destroy.targets(entries, ["a1", "a2"], "m1")
    by_name = {s["name"]: s for s in plan["sessions"]}
    assert by_name["s1"]["agents"] == ["a1"] and by_name["s1"]["manager"] == []
    assert by_name["s2"]["manager"] == ["m1"] and by_name["s3"]["agents"] == ["a1", "a2"]
    assert by_name["s4"]["unlisted"] == ["gone"]
    assert plan["agents"] == ["a1", "a2"] and plan["managers"] == ["m1"]

    def item(name, removed=(), failed=False):
        return {"item": by_name[name], "removed": list(removed), "failed": failed}

    containers = {
        "a1": {"results": [item("s1", ["c1"]), item("s2", ["c2"]), item("s3")]},
        "a2": {"unreachable": True},
    }
    overlays = {"m1": {"results": [item("s2", ["net2"]), item("s3")]}}
    done = {d["name"]: d for d in destroy.outcome(plan, containers, overlays)}
    assert done["s1"]["release"] and done["s1"]["containers"] == ["c1"]
    assert not done["s2"]["release"] and done["s2"]["missed"] == ["a2"]
    assert done["s2"]["networks"] == ["net2"]
    assert not done["s3"]["release"]  # no reservation to release
    assert not done["s4"]["release"] and done["s4"]["unlisted"] == ["gone"]
    failures = destroy.failures(list(done.values()))
    assert len(failures) == 3 and "not removed from a2" in failures[0]
    assert destroy.text(done["s1"]).startswith("session s1: removed 1 container(s)")


def test_agent_show_says_when_the_isolation_table_is_missing():
    missing = {"loaded": False, "marker": None, "problem": "the table is not loaded"}
    reads = {"a1": read("a1"), "a2": read("a2")}
    reads["a2"]["agent"]["isolation"] = missing
    reads["a1"]["agent"]["isolation"] = {"loaded": True, "marker": "m", "problem": None}
    a1, a2 = agent_view.rows([{"name": "a1"}, {"name": "a2"}], reads, {})
    assert a1["isolation_problem"] is None
    assert not any(line.startswith("isolation:") for line in agent_view.details(a1))
    assert agent_view.details(a2)[-1] == (
        "isolation:    MISSING: the table is not loaded (no session starts here; load it "
        "with playbooks/session_isolation.yml)"
    )
