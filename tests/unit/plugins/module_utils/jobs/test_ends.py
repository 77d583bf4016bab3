"""The ends the toolkit causes (module_utils/jobs/ends.py): a lifetime (timeout), a forced
drain (preempted) and an agent that did not answer (lost) are told apart from the command
failing, in the record destroy keeps and in the exit code of ``session run``."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.jobs import ends, job
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.end_signals import (
    warnings,
)

from bai_cli.api import JobResult

# What the removal read: the stop's SIGTERM reached the command (the runner says cancelled).
STOPPED = {"state": "cancelled", "terminal": True, "exit_code": 143, "reason": "stopped"}


@pytest.mark.parametrize(
    ("state", "code", "status"),
    [
        ("succeeded", 0, 0),
        ("failed", 7, 7),
        ("failed", None, 1),
        ("failed", 300, 1),
        ("cancelled", 143, 130),
        ("timeout", 143, 124),
        ("preempted", 143, 75),
        ("lost", None, 69),
        ("running", None, 1),
    ],
)
def test_each_end_has_its_exit_code(state, code, status):
    assert ends.exit_status(state, code) == status
    assert JobResult("s1", state, exit_code=code).exit_status == status


def test_the_toolkits_ends_are_terminal_states():
    assert {job.TIMEOUT, job.PREEMPTED, job.LOST} <= set(job.TERMINAL)
    assert set(ends.EXIT_CODES) <= set(job.TERMINAL)


def test_a_stop_for_a_lifetime_or_a_drain_is_recorded_as_such():
    up = ends.toolkit_end(STOPPED, "s1", timed_out=["s1"])
    assert up is not None and (up["state"], up["terminal"]) == ("timeout", True)
    assert "lifetime" in up["reason"] and up["exit_code"] == 143
    why = "agent a1 was drained (agent drain --force)"
    drained = ends.toolkit_end(STOPPED, "s1", preempted=["s1"], reason=why)
    assert drained is not None and (drained["state"], drained["reason"]) == ("preempted", why)
    # A destroy the user asked for stays cancelled; another session's stop is not this one's.
    assert ends.toolkit_end(STOPPED, "s1", preempted=["s2"]) == STOPPED


@pytest.mark.parametrize("own", ["succeeded", "failed", "lost"])
def test_a_command_that_ended_by_itself_first_keeps_its_own_end(own):
    done = {**STOPPED, "state": own}
    assert ends.toolkit_end(done, "s1", timed_out=["s1"], preempted=["s1"]) == done


def test_no_record_for_an_interactive_session_or_an_end_not_known_yet():
    assert ends.toolkit_end(None, "s1", timed_out=["s1"]) is None
    assert ends.toolkit_end({"state": "ending", "terminal": False}, "s1") is None
    # A stop that found the command still going (removal read it before it ended) is
    # still the toolkit's end.
    going = {"state": "ending", "terminal": False}
    assert ends.toolkit_end(going, "s1", timed_out=["s1"])["state"] == "timeout"


def test_a_forced_drain_warns_the_sessions_that_asked_and_waits_the_longest_lead():
    def entry(sid, signal, agents):
        return Reservation.from_dict(
            {
                "session_id": sid,
                "kernels": [{"agent": a} for a in agents],
                **({"end_signal": signal} if signal else {}),
            }
        )

    sessions = {
        "a": entry("ia", "USR1@30", ["a1", "a2"]),
        "b": entry("ib", "TERM@900", ["a1"]),
        "c": entry("ic", None, ["a1"]),
    }
    said = warnings(sessions, ["a", "b", "c", "gone"], 600)
    assert said["rows"] == [
        {"agent": "a1", "session": "a", "session_id": "ia", "signal": "USR1"},
        {"agent": "a2", "session": "a", "session_id": "ia", "signal": "USR1"},
        {"agent": "a1", "session": "b", "session_id": "ib", "signal": "TERM"},
    ]
    assert said["lead_s"] == 600  # b asked for 900: the drain's own timeout bounds it
    assert warnings(sessions, ["a"], "600")["lead_s"] == 30
    assert warnings(sessions, ["c"], 600) == {"rows": [], "lead_s": 0}
