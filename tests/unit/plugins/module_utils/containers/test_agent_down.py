"""An agent that is down (docs/operations.md, "An agent that is down"): placement passes
over an agent a create could not read, list marks the sessions on it, and a forced
destroy releases the reservation and leaves the leftovers to reconcile."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.containers import destroy
from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import (
    format_table,
    summarize_sessions,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    reservations,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.kept_reads import (
    fresh_reads,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import reconcile
from ansible_collections.bai.cluster.plugins.modules import bai_session_ledger, bai_session_summary
from ansible_collections.bai.cluster.plugins.plugin_utils import ledger_text
from availability_fake import ledger_args, read
from docker_fake import FakeEngine, run_module
from ledger_fake import info, place, reads_of


def test_a_create_passes_over_an_agent_it_could_not_read(tmp_path):
    args = {**ledger_args(tmp_path / "ledger.json", "s1", reads=[read("a2")]), "unanswered": ["a1"]}
    placed = run_module(bai_session_ledger, args, FakeEngine())
    assert placed["agents"] == ["a2"] and placed["unavailable"] == ["a1"], placed
    # Too big for a2 alone: PENDING, naming a1 and why, and never final.
    big = {**args, "spec": {**args["spec"], "name": "s2", "size": 3, "mode": "multi-node"}}
    pending = run_module(bai_session_ledger, big, FakeEngine())
    assert pending["pending"] and pending["permanent"] is False, pending
    assert "a1 did not answer this create's read" in pending["msg"]


def test_a_create_of_a_session_an_unread_agent_may_hold_fails_and_changes_nothing(tmp_path):
    path = tmp_path / "ledger.json"
    first = run_module(bai_session_ledger, ledger_args(path, "s1"), FakeEngine())
    assert first["agents"] == ["a1"], first
    before = path.read_text()
    args = {**ledger_args(path, "s1", reads=[read("a2")]), "unanswered": ["a1"]}
    failed = run_module(bai_session_ledger, args, FakeEngine())
    assert failed["failed"] and "a1 did not answer and may hold it" in failed["msg"], failed
    assert path.read_text() == before


def test_the_sessions_on_an_agent_that_does_not_answer_are_listed_unreachable():
    ledger = document.empty()
    place(
        ledger,
        "both",
        [info("a1", cpu=2), info("a2", cpu=2)],
        size=2,
        mode="multi-node",
        resources={"cpu": 2},
    )
    place(ledger, "far", [info("a2", cpu=8)], size=1, resources={"cpu": 1})
    both = ledger.sessions["both"]
    seen = {
        "agent": "a1",
        "name": "bai-both-main1",
        "state": "running",
        "labels": {
            "ai.backend.cluster.session": "both",
            "ai.backend.cluster.session-id": both.session_id,
            "ai.backend.cluster.size": "2",
            "ai.backend.cluster.host": "main1",
        },
    }
    rows = {r["name"]: r for r in summarize_sessions([seen], ledger.to_dict()["sessions"], ["a2"])}
    assert rows["both"]["state"] == "unreachable" and rows["both"]["unreachable"] == ["a2"]
    assert rows["both"]["agents"] == ["a1", "a2"] and rows["both"]["running"] == 1
    assert rows["far"]["state"] == "unreachable" and rows["far"]["found"] == 0
    lines = format_table(list(rows.values()))
    assert "unreachable (a2 does not answer; 1/2 seen up)" in lines[1]
    # Every agent answered: the containers alone say what runs.
    assert [r["state"] for r in summarize_sessions([seen], ledger.to_dict()["sessions"], [])] == [
        "incomplete"
    ]


def test_a_forced_destroy_leaves_the_part_it_could_not_reach_to_reconcile():
    ledger = document.empty()
    reads = [info("a1", cpu=2), info("a2", cpu=2)]
    place(ledger, "s", reads, size=2, mode="multi-node", resources={"cpu": 2})
    sid = ledger.sessions["s"].session_id
    plan = destroy.targets(
        [{"item": "s", "reservation": ledger.sessions["s"].to_dict(), "holders": ["a1", "a2"]}],
        ["a1", "a2"],
        "m",
    )
    item = {"item": plan["sessions"][0], "removed": ["bai-s-main1"]}
    containers = {"a1": {"results": [item]}, "a2": {"unreachable": True}}
    overlays = {"m": {"results": [{"item": plan["sessions"][0], "removed": ["bai-s-net"]}]}}
    (kept,) = destroy.outcome(plan, containers, overlays)
    assert not kept["release"] and destroy.failures([kept])
    (done,) = destroy.outcome(plan, containers, overlays, force=True)
    assert done["release"] and done["forced"] and done["left_on"] == ["a2"]
    assert destroy.failures([done]) == []
    assert "its part on a2" in destroy.text(done) and "session reconcile" in destroy.text(done)

    assert reservations.forsake(ledger, "s", sid, done["left_on"], now=2000.0)
    assert "s" not in ledger.sessions and ledger.forsaken[sid].agents == ["a2"]
    # a2 answers again with the session's container: reconcile removes it, never adopts.
    leftover = {
        "name": "bai-s-sub1",
        "labels": {
            "ai.backend.cluster.session": "s",
            "ai.backend.cluster.session-id": sid,
            "ai.backend.cluster.size": "1",  # complete by its labels: still removed
        },
    }
    back = {**info("a2", cpu=2, read_at=3000.0), "containers": [leftover], "read_after": 2999.0}
    done_ = reconcile.reconcile(
        ledger, fresh_reads(reads_of([back])), now=3000.0, every_agent_read=False
    )
    assert done_.forsaken == ["s"] and done_.adopted == []
    assert done_.remove == [
        {"agent": "a2", "session": "s", "session_id": sid, "containers": 1, "forced": True}
    ]
    assert "left by a forced destroy of session s" in " ".join(
        ledger_text.reconcile_lines(done_._asdict())
    )
    # Once a2 runs nothing of it, the ledger forgets it.
    empty = {**info("a2", cpu=2, read_at=4000.0), "read_after": 3999.0}
    reconcile.reconcile(ledger, fresh_reads(reads_of([empty])), now=4000.0, every_agent_read=True)
    assert ledger.forsaken == {}


def test_the_summary_module_marks_the_sessions_of_unreached_agents():
    reservations = {
        "far": {"session_id": "k1", "kernels": [{"agent": "a2", "host": "main1"}]},
        "near": {"session_id": "k2", "kernels": [{"agent": "a1", "host": "main1"}]},
    }
    done = run_module(
        bai_session_summary,
        {"agent_info": [], "unreached": ["a2"], "reservations": reservations},
        FakeEngine(),
    )
    assert [(r["name"], r["state"]) for r in done["sessions"]] == [("far", "unreachable")]
    assert done["table"][1].startswith("far")
