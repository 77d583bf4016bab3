"""A restartable batch session with a member on an agent that does not answer
(scheduling/steps/fencing.py): when reconcile may end the attempt and queue the gang again, what
the earlier attempt left is told apart by its attempt label (same session id), and the
destroy forces only those sessions."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_RESTART_COUNT,
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers import destroy
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import kept_reads
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_state import (
    AgentState,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    KeptRead,
    Ledger,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.kept_reads import (
    fresh_reads,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import (
    fencing,
    reconcile,
    restarts,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import JobEnd
from ledger_fake import reads_of

SID = "sid-1"


@pytest.mark.parametrize(
    ("status", "seconds"),
    [
        ("Exited (3) 12 seconds ago", 12),
        ("Exited (0) 1 second ago", 1),
        ("Exited (137) Less than a second ago", 0),
        ("Exited (0) About a minute ago", 60),
        ("Exited (0) 5 minutes ago", 300),
        ("Exited (1) About an hour ago", 3600),
        ("Dead", None),
        ("Up 3 seconds", None),
        ("", None),
    ],
)
def test_how_long_a_container_has_been_stopped_is_read_from_its_status(status, seconds):
    assert fencing.stopped_for(status) == seconds


def entry(attempt=0, restarts=1):
    return Reservation.from_dict(
        {
            "name": "job",
            "session_id": SID,
            "spec_hash": "h",
            "state": "ready",
            "spec": {"name": "job", "type": "batch", "restarts": restarts},
            "attempt": attempt,
            "kernels": [
                {"host": "main1", "agent": "a1", "cpu": 1.0, "mem": 1, "gpu": 0},
                {"host": "sub1", "agent": "a2", "cpu": 1.0, "mem": 1, "gpu": 0},
            ],
        }
    )


def row(state, status, attempt=0, host="main1", sid=SID):
    labels = {LABEL_SESSION: "job", LABEL_SESSION_ID: sid, LABEL_RESTART_COUNT: str(attempt)}
    labels["ai.backend.cluster.host"] = host
    return {"name": f"bai-job-{host}", "state": state, "status": status, "labels": labels}


def read(agent, *rows):
    return {"agent": {"name": agent}, "containers": list(rows)}


def fresh(*reads):
    """The reads by agent, as reconcile gives them to fencing."""
    return kept_reads.fresh_reads(reads_of(reads))


@pytest.mark.parametrize(
    ("rows", "attempt", "over"),
    [
        ([row("exited", "Exited (1) 40 seconds ago")], 0, True),
        ([], 0, True),  # main1 gone from a1 as well
        ([row("exited", "Exited (1) 12 seconds ago")], 0, False),  # not for FENCE_S yet
        ([row("running", "Up 2 minutes")], 0, False),  # main1 still runs
        ([row("exited", "Exited (1) 40 seconds ago")], 1, False),  # no restart left
    ],
)
def test_a_gang_is_over_once_the_members_that_answer_stopped_for_the_fence(rows, attempt, over):
    ledger = Ledger(sessions={"job": entry(attempt)})
    found = fencing.fenced(ledger, fresh(read("a1", *rows)), ["a2"])
    assert found == ([{"name": "job", "session_id": SID, "agents": ["a2"]}] if over else [])


def test_without_a_member_that_answers_nothing_is_fenced():
    ledger = Ledger(sessions={"job": entry()})
    assert fencing.fenced(ledger, {}, ["a1", "a2"]) == []


def test_the_restart_keeps_the_kept_read_of_the_agent_that_did_not_answer():
    def kept() -> KeptRead:
        return KeptRead(
            agent=AgentState.from_dict({"used_cpu": 1.0, "used_mem": 1, "used_gpu": 0}),
            sessions={SID: {"name": "job", "cpu": 1.0, "mem": 1, "gpu": 0}},
        )

    ledger = Ledger(sessions={"job": entry()}, agents={"a1": kept(), "a2": kept()})
    queued = restarts.restart(ledger, "job", SID, JobEnd(state="lost"), 10.0, left_on=["a2"])
    assert queued is not None and queued.attempts and queued.attempts[0].left_on == ["a2"]
    assert SID not in ledger.agents["a1"].sessions  # released where it was removed
    assert SID in ledger.agents["a2"].sessions  # still counted where it may run
    # ... but no longer makes a2 a holder of job: a create need not wait for a2.
    assert kept_reads.holders(ledger, "job") == set()


def test_reconcile_removes_an_earlier_attempts_leftovers_and_only_those():
    job = entry(attempt=1)
    job.kernels = job.kernels[:1]
    ledger = Ledger(sessions={"job": job})
    reads = [
        {**read("a1", row("running", "Up 5 seconds", attempt=1)), "read_at": 1, "read_after": 0},
        {**read("a2", row("exited", "Exited (1) 3 minutes ago", 0, "sub1")), "read_at": 1},
    ]
    reads[1]["read_after"] = 0
    done = reconcile.reconcile(ledger, fresh_reads(reads_of(reads)), now=2.0, every_agent_read=True)
    (gone,) = done.remove
    assert (gone["agent"], gone["session_id"], gone["before_attempt"]) == ("a2", SID, 1)
    assert "job" in ledger.sessions and not done.dropped and not done.incomplete


def test_the_destroy_forces_only_the_fenced_sessions():
    plan = {
        "sessions": [
            {"name": n, "session_id": n, "agents": ["a1", "a2"], "manager": [], "unlisted": []}
            for n in ("job", "other")
        ]
    }
    results = [{"item": {"name": n}, "removed": [n]} for n in ("job", "other")]
    answered = {"a1": {"results": results}}
    done = {d["name"]: d for d in destroy.outcome(plan, answered, {}, fenced=["job"])}
    assert (done["job"]["release"], done["job"]["left_on"]) == (True, ["a2"])
    assert (done["other"]["release"], done["other"]["left_on"]) == (False, [])
    assert destroy.failures(list(done.values())) and "job" not in " ".join(
        destroy.failures(list(done.values()))
    )


def test_a_pass_is_told_how_long_until_a_fence_ends():
    ledger = Ledger(sessions={"job": entry()})
    soon = fresh(read("a1", row("exited", "Exited (1) 12 seconds ago")))
    assert fencing.fence_in(ledger, soon, ["a2"]) == fencing.FENCE_S - 12
    over = fresh(read("a1", row("exited", "Exited (1) 40 seconds ago")))
    assert fencing.fence_in(ledger, over, ["a2"]) is None
    running = fresh(read("a1", row("running", "Up 1 minute")))
    assert fencing.fence_in(ledger, running, ["a2"]) is None
