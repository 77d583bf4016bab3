"""Agents taken out of the cluster and added back: site.yml's hold of an agent it is
adding, the mark agent_remove.yml leaves, the ledger forgetting an agent, and the swarm
node chosen for removal. Real module code on a file ledger and an in-memory engine."""

from __future__ import annotations

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.hosts import swarm
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    availability as avail,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document, roster
from ansible_collections.bai.cluster.plugins.modules import (
    bai_agent_membership,
    bai_session_ledger,
)
from availability_fake import ledger_args, on_the_agent, pause_in_ledger
from docker_fake import FakeEngine, run_module


def record(purpose=avail.OPERATOR, availability="pause"):
    return avail.make_record(
        availability, name="a1", identity="n1", by="bob", reason="", now=0.0, purpose=purpose
    )


# --- site.yml's hold ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("own", "in_swarm", "hold", "step"),
    [
        (None, False, True, "write"),  # a new agent: in no swarm, no record
        (None, True, True, "keep"),  # a rerun over a cluster in service
        ("removed", True, True, "write"),  # coming back after agent remove
        ("removed", False, True, "write"),
        ("operator", False, True, "keep"),  # an operator's pause is never touched
        ("setup", False, True, "keep"),  # held already (an earlier run failed)
        ("setup", True, False, "clear"),  # the end of site.yml
        ("operator", True, False, "keep"),
        ("removed", True, False, "keep"),  # a run that failed before the hold
        (None, True, False, "keep"),
    ],
)
def test_site_yml_holds_and_clears_only_its_own_record(own, in_swarm, hold, step):
    current = record(own) if own else None
    assert avail.setup_step(current, hold=hold, in_swarm=in_swarm) == step


def test_the_words_say_who_holds_an_agent_and_why():
    held = avail.describe(record(avail.SETUP))
    assert held.startswith("being added by site.yml") and "firewall" in held
    removed = avail.describe(record(avail.REMOVED, "drain"))
    assert removed.startswith("removed from the cluster by bob")
    assert "site.yml" in avail.admits(record(avail.REMOVED, "drain"), session_there=False)
    assert "activate" in avail.admits(record(), session_there=False)
    with pytest.raises(ValueError, match="purpose"):
        avail.make_record("pause", name="a", identity="", by="", reason="", now=0, purpose="x")


def hold(tmp_path, engine, availability="pause", purpose="setup"):
    return on_the_agent(
        engine, tmp_path, availability, purpose=purpose, by="site.yml", reason="being added"
    )


def test_the_module_holds_a_new_agent_and_site_yml_s_end_clears_it(tmp_path):
    engine = FakeEngine()  # in no swarm
    held = hold(tmp_path, engine)
    assert held["changed"] and held["record"]["purpose"] == "setup", held
    assert hold(tmp_path, engine)["changed"] is False  # idempotent
    cleared = hold(tmp_path, engine, "active")
    assert cleared["changed"] and cleared["record"] is None
    assert avail.read_marker(str(tmp_path / "state")) == {}


def test_the_module_never_clears_an_operator_s_pause_for_site_yml(tmp_path):
    engine = FakeEngine()
    paused = hold(tmp_path, engine, "pause", "operator")
    assert paused["changed"] and "purpose" not in paused["record"]
    assert hold(tmp_path, engine)["changed"] is False
    assert hold(tmp_path, engine, "active")["changed"] is False
    assert avail.read_marker(str(tmp_path / "state"))[""].availability == "pause"


def test_a_removed_agent_is_held_then_put_in_service_when_added_back(tmp_path):
    engine = FakeEngine()
    marked = hold(tmp_path, engine, "drain", "removed")
    assert marked["record"]["purpose"] == "removed"
    held = hold(tmp_path, engine)
    assert held["changed"] and held["record"]["purpose"] == "setup"
    assert hold(tmp_path, engine, "active")["record"] is None


def test_check_mode_reports_the_hold_and_writes_nothing(tmp_path):
    found = on_the_agent(FakeEngine(), tmp_path, "pause", purpose="setup", check_mode=True)
    assert found["changed"] is True and found["record"]["purpose"] == "setup"
    assert not (tmp_path / "state").exists()


# --- the ledger forgets an agent ------------------------------------------------------
def ledger_with(sessions=(), agents=("a1", "a2")):
    ledger = document.empty()
    for agent in agents:
        read = {"agent": {"name": agent, "id": f"id-{agent}"}}
        ledger.agents[agent] = document.KeptRead.from_dict(read)
    for name, agent in sessions:
        ledger.sessions[name] = document.Reservation.from_dict(
            {"session_id": f"sid-{name}", "kernels": [{"agent": agent}]}
        )
    return ledger


def test_forgetting_an_agent_is_refused_while_a_session_holds_it():
    ledger = ledger_with([("s1", "a2"), ("s2", "a1")])
    before = document.dumps(ledger)
    gone = roster.forget_agent(ledger, "a2", "id-a2")
    assert gone.holding == ["s1"] and gone.dropped == []
    assert document.dumps(ledger) == before


def test_forgetting_an_agent_drops_its_records_and_keeps_its_leftovers_known():
    ledger = ledger_with([("s2", "a1")])
    avail.set_availability(ledger, record(availability="drain"), name="a2", identity="id-a2")
    ledger.forsaken = {
        "x": document.Forsaken(name="old", agents=["a2"], at=0),
        "y": document.Forsaken(name="wide", agents=["a1", "a2"], at=0),
    }
    gone = roster.forget_agent(ledger, "a2", "id-a2")
    assert gone.holding == [] and "its kept read" in gone.dropped
    assert "its availability record" in gone.dropped
    assert "a2" not in ledger.agents and ledger.availability == {}
    # Leftovers stay known: reconcile removes them if the agent is ever added back.
    assert set(ledger.forsaken) == {"x", "y"}
    assert "s2" in ledger.sessions and "a1" in ledger.agents
    assert roster.forget_agent(ledger, "a2", "id-a2") == roster.Forgotten([], [])


def test_the_module_forgets_an_agent_in_a_file_ledger_and_a_rerun_changes_nothing(tmp_path):
    path = tmp_path / "ledger.json"
    pause_in_ledger(path, "a2", "drain")
    args = {"agent": "a2", "state": "absent", "path": str(path)}
    checked = run_module(bai_agent_membership, args, FakeEngine(), check_mode=True)
    assert checked["changed"] is True and checked["node"] is None
    assert "a2" in json.dumps(json.loads(path.read_text())["availability"])
    done = run_module(bai_agent_membership, args, FakeEngine())
    assert done["changed"] is True and done["dropped"] == ["its availability record"], done
    assert json.loads(path.read_text())["availability"] == {}
    assert run_module(bai_agent_membership, args, FakeEngine())["changed"] is False


def test_the_module_refuses_while_a_session_is_reserved_there(tmp_path):
    path = tmp_path / "ledger.json"
    placed = run_module(bai_session_ledger, ledger_args(path, "s1"), FakeEngine())
    agent = placed["agents"][0]
    refused = run_module(
        bai_agent_membership, {"agent": agent, "state": "absent", "path": str(path)}, FakeEngine()
    )
    assert refused["failed"] and "s1" in refused["msg"] and "--dead" in refused["msg"]
    assert "s1" in json.loads(path.read_text())["sessions"]


# --- the swarm node removed -----------------------------------------------------------
def node(node_id, hostname, role="worker"):
    return {"ID": node_id, "Description": {"Hostname": hostname}, "Spec": {"Role": role}}


def test_the_node_removed_is_the_agent_s_own_and_never_a_manager():
    nodes = [node("m1", "manager", "manager"), node("w1", "agent1"), node("w2", "agent2")]
    assert swarm.node_of_agent(nodes, "agent2", "w2") == (nodes[2], "")
    assert swarm.node_of_agent(nodes, "agent2") == (nodes[2], "")  # by hostname, unread
    assert swarm.node_of_agent(nodes, "agent2", "gone") == (None, "")  # removed already
    assert swarm.node_of_agent(nodes, "agent1", "w1/slot1") == (None, "")  # a slot: no node
    found, problem = swarm.node_of_agent(nodes, "manager")
    assert found is None and "demote" in problem
    twins = [node("w1", "agent1"), node("w9", "agent1")]
    found, problem = swarm.node_of_agent(twins, "agent1")
    assert found is None and "several swarm nodes" in problem


def test_a_maintenance_drain_says_so_and_an_operator_activates_it_as_any_other():
    drained = record(avail.MAINTENANCE, "drain")
    assert avail.describe(drained).startswith("drained for maintenance by bob")
    assert "activate" in avail.admits(drained, session_there=False)
    # site.yml's hold leaves it alone, as any record not its own.
    assert avail.setup_step(drained, hold=True, in_swarm=True) == "keep"
    assert avail.setup_step(drained, hold=False, in_swarm=True) == "keep"
