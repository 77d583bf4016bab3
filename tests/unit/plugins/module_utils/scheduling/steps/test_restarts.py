"""Gang restarts of batch sessions (docs/sessions.md, "Restarts"): the request's policy
(session/restart_policy.py), which ends count, and the session ledger run as a module over
a real file ledger - a counted end puts the session back at the head of its queue with
its session id, the next scheduler pass starts it with the attempt on every container's
labels, the counter stops at the maximum, and every attempt's end is kept."""

from __future__ import annotations

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_RESTART_COUNT
from ansible_collections.bai.cluster.plugins.module_utils.jobs.attempts import kept_name, logs_where
from ansible_collections.bai.cluster.plugins.module_utils.session.env import cluster_env
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import JobEnd
from ansible_collections.bai.cluster.plugins.module_utils.session.restart_policy import (
    parse_restart_policy,
    restart_reason,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
    spec_hash,
)
from ledger_fake import ONE_AGENT, ledger_step, reserve
from ledger_fake import fresh_read as read

AGENTS = ONE_AGENT


def job_spec(name="job", cpu=4, **policy):
    return {
        "name": name,
        "size": 2,
        "resources": {"cpu": cpu / 2},
        "owner": "u",
        "type": "batch",
        "command": "python train.py",
        **policy,
    }


create = reserve


def end(path, name, session_id, ended):
    return ledger_step(path, state="absent", name=name, session_id=session_id, ended=ended)


FAILED_3 = {"state": "failed", "exit_code": 3, "started": 1.0, "ended": 2.0, "members": {}}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2VrZXlmb3J0ZXN0aW5nb25seQ alice"


# --- the request ------------------------------------------------------------------------


def test_the_policy_is_read_from_a_list_or_a_string_and_left_out_of_the_hash():
    spec = normalize_spec(job_spec(restarts=2, restart_on="75, 3"))
    assert (spec.restarts, spec.restart_on) == (2, (3, 75))
    assert spec_hash(spec) == spec_hash(normalize_spec(job_spec()))
    assert parse_restart_policy({"restarts": "1", "restart_on": [3]}, "batch") == (1, (3,))
    assert parse_restart_policy({}, "interactive") == (0, ())


@pytest.mark.parametrize(
    ("given", "kind", "words"),
    [
        ({"restarts": 1}, "interactive", "only a batch session"),
        ({"restarts": 101}, "batch", "session_restarts: got 101"),
        ({"restarts": -1}, "batch", "session_restarts: got -1"),
        ({"restarts": 1, "restart_on": [0]}, "batch", "a whole number 1-255"),
        ({"restarts": 1, "restart_on": [256]}, "batch", "a whole number 1-255"),
        ({"restarts": 1, "restart_on": "3;rm -rf /"}, "batch", "a whole number 1-255"),
        ({"restarts": 1, "restart_on": [True]}, "batch", "expected exit codes"),
        ({"restarts": 1, "restart_on": {"3": 1}}, "batch", "expected a list"),
        ({"restarts": 1, "restart_on": list(range(1, 40))}, "batch", "at most 32"),
        ({"restart_on": [3]}, "batch", "restarts is 0"),
    ],
)
def test_a_bad_policy_is_refused_with_what_it_takes(given, kind, words):
    with pytest.raises(SpecError, match=words):
        parse_restart_policy(given, kind)


@pytest.mark.parametrize(
    ("ended", "codes", "counts"),
    [
        ({"state": "lost"}, (), "an agent did not answer"),
        ({"state": "preempted"}, (), "a drain stopped it"),
        (
            {"state": "failed", "failed": {"host": "sub1", "why": "gone while the command ran"}},
            (),
            "sub1 was gone",
        ),
        ({"state": "failed", "failed": {"host": "sub1", "oom_killed": True}}, (), "OOM"),
        ({"state": "failed", "exit_code": 137, "signal": "SIGKILL"}, (), "killed by SIGKILL"),
        ({"state": "failed", "exit_code": 3}, (3, 75), "exited 3"),
        ({"state": "failed", "exit_code": 4}, (3, 75), ""),
        ({"state": "succeeded", "exit_code": 0}, (0,), ""),
        ({"state": "cancelled", "exit_code": 143, "signal": "SIGTERM"}, (), ""),
        ({"state": "timeout", "exit_code": 143}, (143,), ""),
        ({"state": "lost", "final": True}, (), ""),  # a destroy forced by hand
    ],
)
def test_which_ends_restart_the_gang(ended, codes, counts):
    reason = restart_reason(JobEnd.of(ended) or JobEnd(), codes)
    assert (counts in reason) if counts else reason == ""


# --- the ledger ---------------------------------------------------------------------------


def test_a_counted_end_queues_the_gang_again_at_the_head_with_its_id_until_the_maximum(tmp_path):
    path = tmp_path / "ledger.json"
    made = create(path, job_spec(restarts=1, restart_on=[3]), keys=[KEY])
    sid = made["session_id"]
    entry = made["reservation"]
    assert (entry["attempt"], entry["spec"]["restarts"], entry["authorized_keys"]) == (0, 1, [KEY])
    assert {k["labels"][LABEL_RESTART_COUNT] for k in made["kernels"]} == {"0"}
    ledger_step(path, state="ready", name="job", session_id=sid)
    # Another session waits for the room the job holds: queued before the restart.
    waiting = create(path, job_spec("later", cpu=6), queue=True)
    assert waiting["queued"]["position"] == 1

    again = end(path, "job", sid, FAILED_3)
    assert again["restarted"]["attempt"] == 1 and "exited 3" in again["restarted"]["reason"]
    book = json.loads(path.read_text())
    assert "job" not in book["sessions"]  # its share is released: nothing overlaps
    queued = book["queue"]["job"]
    assert (queued["head"], queued["session_id"], queued["attempt"]) == (True, sid, 1)
    assert [a["attempt"] for a in queued["attempts"]] == [0]
    assert queued["attempts"][0]["exit_code"] == 3
    # At the head, ahead of the session queued before it.
    shown = ledger_step(path, state="read", name="later")["queued"]
    assert shown["position"] == 2

    passed = ledger_step(path, state="scheduled", agents=AGENTS, limit=1)
    (start,) = passed["start"]
    assert (start["name"], start["authorized_keys"]) == ("job", [KEY])
    second = create(path, start["spec"], ticket=start["ticket"], keys=start["authorized_keys"])
    assert second["action"] == "create" and second["session_id"] == sid
    assert {k["labels"][LABEL_RESTART_COUNT] for k in second["kernels"]} == {"1"}
    assert second["reservation"]["attempt"] == 1
    ledger_step(path, state="ready", name="job", session_id=sid)

    # The same end again: restarts are used up, so the session ends and is remembered.
    last = end(path, "job", sid, FAILED_3)
    assert "restarted" not in last
    (record,) = ledger_step(path, state="read", name="job")["ended"]
    assert (record["state"], record["attempt"]) == ("failed", 1)
    assert [a["attempt"] for a in record["attempts"]] == [0]


def test_an_end_the_policy_does_not_count_ends_the_session(tmp_path):
    path = tmp_path / "ledger.json"
    made = create(path, job_spec(restarts=3, restart_on=[3]))
    sid = made["session_id"]
    ledger_step(path, state="ready", name="job", session_id=sid)
    done = end(path, "job", sid, {**FAILED_3, "exit_code": 4})
    assert "restarted" not in done
    book = json.loads(path.read_text())
    assert "job" not in (book.get("queue") or {}) and "job" not in book["sessions"]
    (record,) = book["ended"].values()
    assert record["exit_code"] == 4 and "attempts" not in record


def test_a_session_without_restarts_keeps_no_request_on_its_entry(tmp_path):
    path = tmp_path / "ledger.json"
    made = create(path, job_spec())
    assert not {"spec", "attempt"} & set(made["reservation"])
    assert all(LABEL_RESTART_COUNT not in k["labels"] for k in made["kernels"])
    ledger_step(path, state="ready", name="job", session_id=made["session_id"])
    assert "restarted" not in end(path, "job", made["session_id"], {"state": "lost"})


def test_a_gang_cancelled_while_it_waits_to_start_again_is_remembered(tmp_path):
    path = tmp_path / "ledger.json"
    made = create(path, job_spec(restarts=2))
    sid = made["session_id"]
    ledger_step(path, state="ready", name="job", session_id=sid)
    assert end(path, "job", sid, {"state": "lost", "members": {"main1": "a1"}})["restarted"]
    cancelled = ledger_step(path, state="absent", name="job")
    assert cancelled["cancelled"] is True
    (record,) = ledger_step(path, state="read", name="job")["ended"]
    assert record["session_id"] == sid and record["state"] == "lost"
    assert "cancelled before it started again" in record["reason"]


# --- the containers and the logs ----------------------------------------------------------


def test_the_count_reaches_every_container_as_backendai_session_restart_count():
    spec = normalize_spec(job_spec(restarts=1))
    kernels = expand_kernels(spec)
    env = cluster_env(
        kernels,
        kernels[1],
        session_name="job",
        session_id="s",
        kernel_id="k",
        mode="single-node",
        user_env={"BACKENDAI_SESSION_RESTART_COUNT": "9"},
        image_env={},
        restart_count="1",
    )
    assert env["BACKENDAI_SESSION_RESTART_COUNT"] == "1"


def test_each_attempts_output_has_its_own_file():
    assert kept_name("main1") == kept_name("main1", 0) == "main1.log"
    assert kept_name("sub1", 2) == "sub1.attempt-2.log"


def test_logs_find_each_attempt_where_it_ran():
    first = {"attempt": 0, "state": "lost", "members": {"main1": "a1", "sub1": "a2"}}
    running = {
        "reservation": {
            "session_id": "s",
            "attempt": 1,
            "attempts": [first],
            "kernels": [{"host": "main1", "agent": "a3"}, {"host": "sub1", "agent": "a3"}],
        }
    }
    assert logs_where(running, "main1") == {
        "agent": "a3",
        "session_id": "s",
        "attempt": 1,
        "attempts": 2,
    }
    assert logs_where(running, "sub1", 0)["agent"] == "a2"
    assert logs_where(running, "sub1", "5")["agent"] == ""
    queued = {"queued": {"session_id": "s", "attempt": 1, "attempts": [first]}}
    assert logs_where(queued, "main1") == {
        "agent": "a1",
        "session_id": "s",
        "attempt": 0,
        "attempts": 1,
    }
    plain = {"ended": [{"session_id": "p", "members": {"main1": "a1"}}]}
    assert logs_where(plain, "main1") == {
        "agent": "a1",
        "session_id": "p",
        "attempt": None,
        "attempts": 1,
    }
    assert logs_where({}, "main1")["agent"] == ""


def test_an_owners_policy_caps_the_restarts_and_more_is_refused_at_once(tmp_path):
    path = tmp_path / "ledger.json"
    policies = {"default": {"restarts": 1}, "owners": {"boss": {"restarts": None}}}
    args = {"agents": AGENTS, "agent_info": [read()], "policies": policies, "queue": True}
    refused = ledger_step(path, state="reserved", spec=job_spec(restarts=2), **args)
    assert refused["failed"] and refused["policy"], refused
    assert (
        "session_restarts 2 is more than the 1 that bai_session_policies.default"
        in (refused["msg"])
    )
    assert not path.exists() or not json.loads(path.read_text()).get("queue")
    allowed = ledger_step(path, state="reserved", spec=job_spec(restarts=1), **args)
    assert allowed["action"] == "create", allowed
    boss = ledger_step(
        path, state="reserved", spec={**job_spec("b", restarts=50), "owner": "boss"}, **args
    )
    assert boss["action"] == "create", boss
