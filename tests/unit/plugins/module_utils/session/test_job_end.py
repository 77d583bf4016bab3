"""session/job_end.py: a batch session's end, read once from the ledger's ``ended``."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import (
    END_KEYS,
    JobEnd,
)

GIVEN = {
    "state": "failed",
    "exit_code": 3,
    "signal": None,
    "failed": {"host": "sub1", "oom_killed": False},
    "started": 50,  # kept as given: an int stays an int
    "ended": 99.5,
    "reason": "sub1 (exit 3)",
    "members": {"main1": "a1", "sub1": "a2"},
    "terminal": True,  # what the ledger does not record
    "member_states": [],
}


def test_nothing_given_is_no_end():
    assert JobEnd.of(None) is None and JobEnd.of({}) is None


def test_an_end_picks_the_recorded_keys_in_order_with_values_as_given():
    end = JobEnd.of(GIVEN)
    assert end is not None and not end.final
    picked = end.picked()
    assert list(picked) == list(END_KEYS)
    assert picked == {key: GIVEN[key] for key in END_KEYS}
    assert isinstance(picked["started"], int)  # not made a float
    assert end.failed_member("host") == "sub1" and end.failed_member("why") is None
    assert JobEnd(state="lost").failed_member("host") is None


def test_a_preempted_end_keeps_the_rest_and_attempts_are_added_alongside():
    end = JobEnd.of({**GIVEN, "final": True})
    assert end is not None and end.final
    turned = end.preempted("preempted for high")
    assert (turned.state, turned.reason) == ("preempted", "preempted for high")
    assert turned.picked(("exit_code", "ended", "members")) == {
        "exit_code": 3,
        "ended": 99.5,
        "members": GIVEN["members"],
    }
    earlier = [{"attempt": 0, "state": "lost"}]
    again = turned.with_attempts(1, earlier)
    assert (again.attempt, list(again.attempts)) == (1, earlier) and end.attempts == ()
