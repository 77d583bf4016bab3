"""Batch sessions: the result rules (which state, which member, which code), the
status file, what is kept of the output, the runner's files (module_utils/jobs/job.py)."""

from __future__ import annotations

import io
import subprocess
import tarfile

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_BATCH,
    LABEL_HOST,
    LABEL_SESSION,
    LABEL_SESSION_ID,
    LABEL_SIZE,
)
from ansible_collections.bai.cluster.plugins.module_utils.jobs import job
from ansible_collections.bai.cluster.plugins.module_utils.jobs.job import Member, result
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document, history
from ansible_collections.bai.cluster.plugins.module_utils.session import kinds
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import JobEnd
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
    spec_hash,
)
from hypothesis import given
from hypothesis import strategies as st

MAIN = Member("main1", True, "agent1", "exited", 0, False, 100.0)
SUB = Member("sub1", False, "agent2", "exited", 0, False, 106.0)
STARTED = {"started": 50.0, "ended": 99.0, "exit": 0}


def stopped(member: Member, code: int, oom: bool = False) -> Member:
    return Member(member.host, member.main, member.agent, "exited", code, oom, member.finished_at)


def running(member: Member) -> Member:
    return Member(member.host, member.main, member.agent, "running")


# --- the result rules -------------------------------------------------------------------
def test_a_command_that_exits_0_succeeded_once_every_member_stopped():
    done = result([MAIN, SUB], STARTED)
    assert (done.state, done.exit_code, done.signal, done.failed) == ("succeeded", 0, None, None)
    assert done.terminal and (done.started, done.ended) == (50.0, 99.0)


def test_not_terminal_while_a_member_runs():
    assert result([running(MAIN), running(SUB)], {}).state == "starting"
    assert result([running(MAIN), running(SUB)], {"started": 1.0}).state == "running"
    ending = result([MAIN, running(SUB)], STARTED)
    assert ending.state == "ending" and not ending.terminal
    assert "sub1" in ending.reason


def test_a_failed_command_names_main1_and_its_code():
    done = result([stopped(MAIN, 7), SUB], {**STARTED, "exit": 7})
    assert (done.state, done.exit_code) == ("failed", 7)
    assert done.failed["host"] == "main1" and done.failed["exit_code"] == 7
    assert "exited 7" in done.reason


def test_a_command_killed_by_a_signal_names_it():
    done = result([stopped(MAIN, 137), SUB], {**STARTED, "exit": 137})
    assert (done.exit_code, done.signal) == (137, "SIGKILL")


def test_a_member_killed_for_memory_is_the_first_failure_when_main1_was_not():
    done = result([stopped(MAIN, 1), stopped(SUB, 0, oom=True)], {**STARTED, "exit": 1})
    assert done.state == "failed"
    assert done.failed["host"] == "sub1" and done.failed["oom_killed"]
    assert "OOM" in done.reason


def test_main1_killed_for_memory_is_named_with_the_flag():
    done = result(
        [stopped(MAIN, 137, oom=True), stopped(SUB, 0, oom=True)], {**STARTED, "exit": 137}
    )
    assert done.failed["host"] == "main1" and done.failed["oom_killed"]


def test_a_member_main1_saw_gone_is_the_first_failure():
    done = result([stopped(MAIN, 143), stopped(SUB, 137)], {**STARTED, "exit": 143, "lost": "sub1"})
    assert done.state == "failed"
    assert done.failed == {
        "host": "sub1",
        "agent": "agent2",
        "exit_code": 137,
        "signal": "SIGKILL",
        "oom_killed": False,
        "why": "gone while the command ran",
    }
    assert done.exit_code == 143 and done.signal == "SIGTERM"


def test_a_member_that_is_gone_altogether_is_named():
    done = result([stopped(MAIN, 143)], {**STARTED, "exit": 143, "lost": "sub1"})
    assert done.failed["host"] == "sub1" and "removed" in done.reason


def test_stopped_while_it_ran_is_cancelled_whatever_the_code():
    status = {**STARTED, "exit": 42, "cancelled": "signal"}
    done = result([stopped(MAIN, 42), SUB], status)
    assert (done.state, done.exit_code) == ("cancelled", 42)
    assert result([MAIN, SUB], STARTED, cancelled=True).state == "cancelled"


def test_stopped_before_it_started():
    assert result([stopped(MAIN, 143), SUB], {"cancelled": "before-start"}).state == "cancelled"
    done = result([stopped(MAIN, 1), SUB], {})
    assert done.state == "failed" and "before the command started" in done.reason


def test_an_agent_that_does_not_answer_makes_it_lost():
    done = result([running(MAIN)], {"started": 1.0}, unanswered=["agent2"])
    assert done.state == "lost" and done.terminal and "agent2" in done.reason


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["created", "running", "exited", "dead", "paused"]),
            st.integers(min_value=0, max_value=255),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(min_value=0, max_value=255),
    st.booleans(),
)
def test_terminal_exactly_when_every_member_stopped(rows, code, started):
    members = [
        Member(f"h{i}", i == 0, "a", state, ecode, oom, float(i))
        for i, (state, ecode, oom) in enumerate(rows)
    ]
    status = {"started": 1.0, "exit": code} if started else {}
    done = result(members, status)
    assert done.terminal == all(not m.live for m in members)
    if done.state == "succeeded":
        assert code == 0 and started
    if done.state == "failed" and started and code:
        assert done.exit_code == code and done.failed is not None


# --- status file, signals, output, command ----------------------------------------------
def test_the_status_file_is_read_line_by_line():
    text = "started=10.5\ncancelled=signal\nexit=143\nended=12.25\nbad\nexit=x\noom_kills=2\n"
    assert job.parse_status(text) == {
        "started": 10.5,
        "cancelled": "signal",
        "exit": 143,
        "ended": 12.25,
        "oom_kills": 2,
    }


def test_signal_names():
    assert [job.signal_name(c) for c in (None, 0, 1, 128, 130, 137, 143, 200)] == [
        None,
        None,
        None,
        None,
        "SIGINT",
        "SIGKILL",
        "SIGTERM",
        None,
    ]


def test_what_is_kept_of_a_long_output_is_its_end_from_a_line_start():
    data = b"".join(f"line {i}\n".encode() for i in range(1000))
    assert job.keep_tail(data, 10**6) == data
    kept = job.keep_tail(data, 100)
    assert kept.startswith(b"[bai: the first ") and kept.endswith(b"line 999\n")
    body = kept.split(b"\n", 1)[1]
    assert len(body) <= 100 and body.startswith(b"line ")


def test_the_command_of_each_type():
    assert kinds.check_command(None, "interactive") is None
    assert kinds.check_command("python train.py", "batch") == "python train.py"
    for bad, session_type in (("x", "interactive"), ("", "batch"), (None, "batch"), (3, "batch")):
        with pytest.raises(SpecError, match="command"):
            kinds.check_command(bad, session_type)
    with pytest.raises(SpecError, match="type"):
        kinds.check_command("x", "service")
    with pytest.raises(SpecError, match="longer"):
        kinds.check_command("x" * (kinds.MAX_COMMAND_BYTES + 1), "batch")


def test_a_batch_spec_hashes_its_command_and_an_interactive_one_as_before():
    base = {"name": "t", "size": 2}
    interactive = normalize_spec(base)
    assert spec_hash(interactive) == spec_hash(normalize_spec({**base, "type": "interactive"}))
    one = normalize_spec({**base, "type": "batch", "command": "echo 1"})
    two = normalize_spec({**base, "type": "batch", "command": "echo 2"})
    assert len({spec_hash(interactive), spec_hash(one), spec_hash(two)}) == 3
    assert (one.type, one.command) == ("batch", "echo 1")


def test_the_runner_files_and_the_script_parse():
    data = job.runner_tar(main=True, command="echo hi", workdir="/data", peers=["sub1"], grace_s=5)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: m for m in tar.getmembers()}
        assert files["job"].isdir() and files["job"].mode == 0o700
        assert files["job/run"].mode == 0o700 and files["job/command"].mode == 0o600
        read = {n: tar.extractfile(m).read().decode() for n, m in files.items() if m.isfile()}
    assert read["job/command"] == "echo hi" and read["job/peers"] == "sub1\n"
    assert "grace_s=5\n" in read["job/settings"] and read["job/workdir"] == "/data\n"
    member = job.runner_tar(main=False, command="secret", workdir="/w", peers=["main1"], grace_s=5)
    with tarfile.open(fileobj=io.BytesIO(member)) as tar:
        assert tar.extractfile("job/command").read() == b""
    checked = subprocess.run(["bash", "-n"], input=job.RUNNER_SCRIPT, text=True, check=False)
    assert checked.returncode == 0


# --- putting the agents' reports together -----------------------------------------------
def test_reports_of_every_agent_make_one_result():
    reports = [
        {"members": [vars(stopped(MAIN, 3))], "status": {**STARTED, "exit": 3}},
        {"members": [vars(SUB)], "status": None},
    ]
    done = job.combine(reports)
    assert done["state"] == "failed" and done["exit_code"] == 3
    assert done["members"] == {"main1": "agent1", "sub1": "agent2"}
    registered = {"results": [*reports, {"failed": True, "item": "agent3"}]}
    assert job.job_result(registered)["state"] == "lost"


def _row(name: str, sid: str, host: str, state: str, size: int = 2, batch: str = "member"):
    labels = {LABEL_SESSION: name, LABEL_SESSION_ID: sid, LABEL_HOST: host, LABEL_SIZE: str(size)}
    if batch:
        labels[LABEL_BATCH] = batch
    return {"name": f"bai-{name}-{host}", "state": state, "labels": labels}


def test_ended_sessions_are_complete_batch_sessions_with_nothing_running():
    reads = [
        {
            "containers": [
                _row("done", "1", "main1", "exited", batch="main"),
                _row("runs", "2", "main1", "running", batch="main"),
                _row("part", "3", "main1", "exited", batch="main"),
                _row("inter", "4", "main1", "exited", size=1, batch=""),
            ]
        },
        {
            "containers": [
                _row("done", "1", "sub1", "exited"),
                _row("runs", "2", "sub1", "exited"),
            ]
        },
    ]
    assert job.ended_sessions(reads) == ["done"]


# --- the ledger remembers ends ----------------------------------------------------------
def test_the_ledger_remembers_the_newest_ends():
    ledger = document.empty()
    end = JobEnd.of({"state": "failed", "exit_code": 7, "members": {"main1": "agent1"}, "extra": 1})
    assert end is not None
    for i in range(history.MAX_ENDED + 5):
        history.record_end(ledger, "train" if i % 2 else "other", f"id{i}", end, float(i))
    assert len(ledger.ended) == history.MAX_ENDED
    found = history.ends_of(ledger, "train")
    assert [e["session_id"] for e in found[:2]] == [
        f"id{history.MAX_ENDED + 3}",
        f"id{history.MAX_ENDED + 1}",
    ]
    assert found[0]["exit_code"] == 7 and "extra" not in found[0]
    assert "id0" not in ledger.ended


def test_list_tells_a_batch_session_running_ending_or_ended_with_the_exit_code():
    from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import (
        format_table,
        summarize_sessions,
    )

    def rows(main_state: str, main_status: str, sub_state: str) -> list[dict]:
        main = _row("job", "k1", "main1", main_state, batch="main")
        main["labels"]["ai.backend.cluster.kernel-id"] = "k1"
        main["status"] = main_status
        return [main, _row("job", "k1", "sub1", sub_state)]

    running = summarize_sessions(rows("running", "Up 3 seconds", "running"))[0]
    assert (running["type"], running["state"], running["exit_code"]) == ("batch", "running", None)
    ending = summarize_sessions(rows("exited", "Exited (7) 2 seconds ago", "running"))[0]
    assert (ending["state"], ending["exit_code"]) == ("ending", 7)
    ended = summarize_sessions(rows("exited", "Exited (7) 9 seconds ago", "exited"))
    assert ended[0]["state"] == "ended"
    assert format_table(ended)[1].endswith("batch ended (exit 7)")
    interactive = summarize_sessions([_row("plain", "k2", "main1", "running", 1, batch="")])[0]
    assert "type" not in interactive and interactive["state"] == "running"
