"""bai_session_repair run as a module against a Docker engine in memory, and what a
reconcile says of its outcome (module_utils/containers/repair.py).

SIMULATED: the engine is tests/unit/docker_fake.py's ``FakeEngine``; the integration
suite (test_restart_lab.py) restarts real engines and lets reconcile start what they
left stopped. Sessions are made by bai_session_containers as in
test_module_session_containers.py, with the isolation table in place (patched).
"""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.network import isolation
from ansible_collections.bai.cluster.plugins.modules import bai_session_repair
from ansible_collections.bai.cluster.plugins.plugin_utils.ledger_text import reconcile_lines
from ansible_collections.bai.cluster.plugins.plugin_utils.repair_outcome import outcome
from containers_fake import HOST, args_for, plan_for
from containers_fake import run as make
from docker_fake import api_error, run_module

AGENT = "agent1"


@pytest.fixture
def session(engine, tmp_path):
    """Session s1 (main1, sub1) made on agent1, its sub1 stopped: its session id."""
    root = tmp_path / "data"
    root.mkdir()
    plan = plan_for()
    made = make(args_for(plan, tmp_path, root), engine)
    assert made["changed"] is True, made
    engine.stop("bai-s1-sub1")
    return plan["session_id"]


def rows(sid, containers=("bai-s1-sub1",), agent=AGENT):
    start = {"agent": agent, "session": "s1", "session_id": sid, "containers": list(containers)}
    recheck = {
        "agent": agent,
        "session": "s1",
        "session_id": sid,
        "master": "bai-s1-main1",
        "hosts": ["main1", "sub1"],
    }
    return {"agent": AGENT, "start": [start], "recheck": [recheck], "ssh_timeout": 5}


def run(args, engine, table=True, **kwargs):
    state = {"loaded": table, "marker": None, "problem": None if table else "not loaded"}
    patches = {**HOST, (isolation, "table_state"): lambda host: state}
    return run_module(bai_session_repair, args, engine, patches=patches, **kwargs)


def test_a_stopped_container_is_started_and_the_mesh_checked_then_nothing_more(engine, session):
    engine.calls.clear()
    done = run(rows(session), engine)
    assert done["changed"] is True, done
    assert done["sessions"] == {"s1": {"started": ["bai-s1-sub1"], "mesh": ["ok main1", "ok sub1"]}}
    assert engine.by_name("bai-s1-sub1").status == "running"
    assert engine.called("start") == ["bai-s1-sub1"]
    again = run(rows(session), engine)
    assert again["changed"] is False and again["sessions"]["s1"]["started"] == []


def test_check_mode_names_what_it_would_start_and_starts_nothing(engine, session):
    done = run(rows(session), engine, check_mode=True)
    assert done["changed"] is True and done["sessions"] == {"s1": {"started": ["bai-s1-sub1"]}}
    assert engine.by_name("bai-s1-sub1").status == "exited"


def test_nothing_starts_without_the_isolation_table(engine, session):
    done = run({**rows(session), "recheck": []}, engine, table=False)
    assert done["changed"] is False
    assert done["sessions"]["s1"]["error"].startswith("not started: the session isolation table")
    assert engine.by_name("bai-s1-sub1").status == "exited"


def test_a_failed_start_and_a_gone_container_are_their_sessions_own(engine, session):
    engine.fail("start", "bai-s1-sub1", api_error(500, "cgroup setup failed"), always=True)
    gone = {"agent": AGENT, "session": "s2", "session_id": "id-2", "containers": ["bai-s2-main1"]}
    other = {"agent": "agent2", "session": "s3", "session_id": "id-3", "containers": ["x"]}
    args = {**rows(session), "recheck": []}
    done = run({**args, "start": [*args["start"], gone, other]}, engine)
    assert done["changed"] is False
    assert "bai-s1-sub1 did not start: " in done["sessions"]["s1"]["error"]
    assert done["sessions"]["s2"]["error"] == (
        "not started: container bai-s2-main1 of session s2 (id-2) is not on agent1"
    )
    assert "s3" not in done["sessions"]  # agent2's row


def test_the_outcome_over_every_agent_and_its_lines():
    stopped = [
        {"agent": "a2", "session": "fine", "session_id": "1", "containers": ["bai-fine-sub1"]},
        {"agent": "a2", "session": "bad", "session_id": "2", "containers": ["bai-bad-sub1"]},
        {"agent": "a3", "session": "dark", "session_id": "3", "containers": ["bai-dark-sub1"]},
    ]
    rechecks = [
        {"agent": "a1", "session": name, "session_id": sid, "master": "m", "hosts": ["main1"]}
        for name, sid in (("fine", "1"), ("bad", "2"), ("dark", "3"))
    ]
    started = {
        "a2": {"sessions": {"fine": {"started": ["bai-fine-sub1"]}, "bad": {"started": []}}},
        "a3": {"unreachable": True, "msg": "ssh: connect to host a3 timed out"},
    }
    checked = {
        "a1": {
            "sessions": {
                "fine": {"started": [], "mesh": ["ok main1"]},
                "bad": {"started": [], "mesh": [], "error": "SSH from m does not reach sub1"},
            }
        }
    }
    done = outcome(stopped, rechecks, started, checked)
    assert done == {
        "restarted": ["fine"],
        "restart_failed": {
            "bad": "a1: SSH from m does not reach sub1",
            "dark": "a3: ssh: connect to host a3 timed out; "
            "a1: no mesh check of this session ran there",
        },
    }
    lines = reconcile_lines(done)
    assert lines[0].startswith("started again, their SSH mesh checked") and lines[0].endswith(
        ": fine"
    )
    assert lines[1] == "session bad was not started again: a1: SSH from m does not reach sub1"
    assert reconcile_lines({"stopped": ["fine"]})[0] == (
        "running sessions with stopped containers (a reconcile starts them again): fine"
    )
