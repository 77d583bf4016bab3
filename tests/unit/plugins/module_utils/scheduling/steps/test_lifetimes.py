"""Lifetimes (session_lifetime_s): in the spec but not its hash, on the labels and in the
ledger's entry, counted from when the session started running (ready_at), listed with the
time left, and the sessions whose lifetime is up."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_LIFETIME
from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import (
    format_duration,
    format_table,
    summarize_sessions,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    reservations,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import reconcile
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
    spec_canonical,
    spec_hash,
)
from ansible_collections.bai.cluster.plugins.plugin_utils import ledger_text
from hypothesis import given
from hypothesis import strategies as st
from ledger_fake import ledger_of

GI = 1024**3


def spec(**raw):
    return normalize_spec({"name": "s1", "size": 1, **raw})


def planned(**raw):
    one = spec(**raw)
    return plan_session(one, [Agent("a1", "default", 4, 8 * GI, 0)])


def test_the_lifetime_is_in_the_spec_and_on_the_labels_but_not_in_the_hash():
    assert spec_hash(spec(lifetime_s=600)) == spec_hash(spec()) == spec_hash(spec(lifetime_s=0))
    assert spec_canonical(spec(lifetime_s="600"))["lifetime_s"] == 600
    assert "lifetime_s" not in spec_canonical(spec())
    assert {k.labels[LABEL_LIFETIME] for k in planned(lifetime_s=600).kernels} == {"600"}
    assert all(LABEL_LIFETIME not in k.labels for k in planned().kernels)
    with pytest.raises(SpecError, match="lifetime_s: got -1"):
        spec(lifetime_s=-1)


def test_it_counts_from_when_the_session_was_placed_never_its_submission():
    """Placed (reserved) at 100: its agents' share is its from then, and its deadline is
    100 + 60; nothing is counted down until it runs."""
    entry = reservations.reservation(planned(lifetime_s=60), now=100.0, ttl=900)
    ledger = ledger_of(sessions={"s1": entry})
    assert (entry.lifetime_s, entry.deadline) == (60, 160)
    assert (
        reservations.time_left(entry, 104.0) is None
        and reservations.lifetimes_up(ledger, 104.0) == []
    )
    reservations.mark_ready(ledger, "s1", entry.session_id, 104.0)
    assert reservations.time_left(entry, 130.0) == 30.0
    assert reservations.lifetimes_up(ledger, 159.9) == []
    assert reservations.lifetimes_up(ledger, 160.0) == ["s1"]
    assert reservations.time_left(entry, 5000.0) == 0.0


def test_a_fractional_placement_time_rounds_the_deadline_up_to_a_whole_second():
    entry = reservations.reservation(planned(lifetime_s=60), now=100.25, ttl=900)
    assert entry.deadline == 161


def test_an_entry_from_before_deadlines_counts_from_when_it_started_running():
    entry = Reservation.from_dict({"state": document.READY, "ready_at": 1000.0, "lifetime_s": 60})
    assert reservations.time_left(entry, 1030.0) == 30.0


def test_a_session_without_a_lifetime_never_ends_by_it():
    entry = reservations.reservation(planned(), now=0.0, ttl=900)
    ledger = ledger_of(sessions={"s1": entry})
    reservations.mark_ready(ledger, "s1", entry.session_id, 1.0)
    assert "lifetime_s" not in entry.to_dict() and reservations.lifetimes_up(ledger, 1e12) == []


def test_a_ledger_rebuilt_from_the_labels_gets_the_lifetime_back():
    plan = planned(lifetime_s=90, owner="erin")
    rows = [
        ("a1", ContainerRow.of({"name": k.container_name, "labels": k.labels}))
        for k in plan.kernels
    ]
    entry = reconcile.adopted("s1", plan.session_id, rows, now=5.0)
    assert (entry.lifetime_s, entry.owner) == (90, "erin")
    assert "deadline" not in entry.to_dict()  # the plan's labels: before the ledger gave it one


def test_list_gives_the_time_left_at_the_ledgers_time():
    plan = planned(lifetime_s=3600)
    entry = reservations.reservation(plan, now=0.0, ttl=900)
    ledger = document.empty()
    ledger.sessions["s1"] = entry
    reservations.mark_ready(ledger, "s1", entry.session_id, 3.0)
    read = ledger.to_dict()["sessions"]  # what the listing is given: the ledger's read
    containers = [
        {"agent": "a1", "name": k.container_name, "state": "running", "labels": k.labels}
        for k in plan.kernels
    ]
    (row,) = summarize_sessions(containers, read, now=400.0)
    assert (row["lifetime_s"], row["time_left"]) == (3600, 3200.0)
    assert format_table([row])[1].endswith("running (53m left)")
    (unknown,) = summarize_sessions(containers, read)
    assert unknown["time_left"] is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (119.9, "119s"), (120, "2m"), (7199, "119m"), (7200, "2h00m"), (176400, "2d01h")],
)
def test_durations(seconds, text):
    assert format_duration(seconds) == text


@given(st.floats(0, 1e6), st.floats(1, 1e5), st.floats(0, 2e6))
def test_the_time_left_never_grows_and_is_up_exactly_when_it_reaches_zero(ready, life, now):
    raw = {"state": document.READY, "ready_at": ready, "lifetime_s": life}
    left = reservations.time_left(Reservation.from_dict(raw), now)
    assert left is not None and 0 <= left <= life
    ledger = ledger_of(sessions={"s": raw})
    assert (reservations.lifetimes_up(ledger, now) == ["s"]) == (left == 0)


def test_reconcile_says_which_sessions_it_ended_by_their_lifetime():
    lines = ledger_text.reconcile_lines({"ended": ["b1", "l1"], "lifetime_up": ["l1"]})
    assert lines == [
        "batch sessions whose command ended, destroyed (their output is kept): b1",
        "sessions whose lifetime is up, stopped and destroyed: l1",
    ]
