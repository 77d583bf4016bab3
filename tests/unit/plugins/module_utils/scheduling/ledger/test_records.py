"""The ledger's records (module_utils/scheduling/ledger/records.py, json_record.py): a
reservation, a kept read, a queue entry, an ended and a forsaken session read from their
JSON objects and written back to the same objects, their owners' changes showing in them,
and a damaged one refused."""

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import LedgerError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    counters,
    document,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Attempt,
    Counters,
    Ended,
    Forsaken,
    KeptRead,
    Kernel,
    QueueEntry,
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
    spec_canonical,
)
from hypothesis import given
from hypothesis import strategies as st

CREATING = {
    "name": "s1",
    "session_id": "sid-1",
    "spec_hash": "h",
    "state": document.CREATING,
    "reserved_at": 100.0,
    "expires_at": 160.0,
    "ready_at": None,
    "kernels": [{"host": "main1", "agent": "a1", "cpu": 1.0, "mem": 0, "gpu": 0}],
}


def test_a_reservation_reads_as_its_fields_and_writes_back_the_same_object():
    entry = Reservation.from_dict(CREATING)
    assert (entry.name, entry.state, entry.expires_at) == ("s1", "creating", 160.0)
    assert entry.kernels == [Kernel.from_dict(CREATING["kernels"][0])]
    assert entry.kernels[0].gpu_devices == [] and entry.agents == {"a1"}
    assert entry.owner is None and entry.attempt is None  # absent: as .get() read them
    assert entry.to_dict() == CREATING  # gpu_devices, owner, ...: still absent


def test_what_its_owners_set_shows_and_nothing_else():
    entry = Reservation.from_dict(CREATING)
    entry.confirm(200.0)
    assert entry.to_dict() == {**CREATING, "state": "ready", "expires_at": None, "ready_at": 200.0}
    entry.confirm(300.0, adopted=True)
    entry.signalled(310.0)
    entry.preempted_for("high", 320.0)
    restartable = normalize_spec(
        {"name": "s1", "size": 1, "type": "batch", "command": "true", "restarts": 1}
    )
    entry.keep_for_restarts(restartable, [], 0, [])
    assert entry.to_dict() == {
        **CREATING,
        "state": "ready",
        "expires_at": None,
        "ready_at": 300.0,
        "adopted": True,
        "end_signal_at": 310.0,
        "preempted_by": {"session": "high", "at": 320.0},
        "spec": spec_canonical(restartable),
        "attempt": 0,
    }


QUEUED = {
    "name": "q1",
    "spec": {"name": "q1", "size": 2},
    "spec_hash": "h",
    "group": "default",
    "submitted_at": 50.0,
    "seq": 3,
    "reason": "no agent has room",
}


def test_a_queue_entry_writes_back_what_it_read_and_what_its_owners_set():
    entry = QueueEntry.from_dict(QUEUED)
    assert (entry.name, entry.seq, entry.lease, entry.owner) == ("q1", 3, None, None)
    entry.parsed = object()  # the parsed spec's cache is never written
    assert entry.to_dict() == QUEUED
    entry.lease_to("t1", 80.0)
    entry.waits("a preemption is under way", "preempting")
    assert entry.to_dict() == {
        **QUEUED,
        "lease": {"ticket": "t1", "until": 80.0},
        "reason": "a preemption is under way",
        "wait": "preempting",
    }
    entry.end_lease()
    entry.end_lease()  # over already: nothing to drop
    entry.preempting_for(["low1", "low2"], 90.0)
    assert entry.to_dict() == {
        **QUEUED,
        "reason": "preempting low1, low2 to make room",
        "wait": "preempting",
        "preempting": {"victims": ["low1", "low2"], "at": 90.0},
    }


def test_a_ledger_with_queued_entries_reads_and_writes_the_same_text():
    data = {"version": 1, "sessions": {}, "queue": {"q1": QUEUED}, "queue_seq": 3}
    ledger = document.Ledger.from_dict(json.loads(json.dumps(data)))
    assert isinstance(ledger.queue["q1"], QueueEntry)
    assert json.dumps(ledger.to_dict(), sort_keys=True) == json.dumps(data, sort_keys=True)


def test_ended_and_forsaken_sessions_read_as_records_and_write_the_same_text():
    ended = {"name": "s0", "session_id": "sid-0", "removed_at": 999.0, "exit_code": 0}
    ended |= {"failed": None, "attempts": [{"attempt": 0, "state": "lost"}], "zz": 1}
    data = {
        "version": 1,
        "sessions": {},
        "ended": {"sid-0": ended},
        "forsaken": {"sid-9": {"name": "s9", "agents": ["a2"], "at": 998}},
    }
    text = json.dumps(data, sort_keys=True)
    ledger = document.Ledger.from_dict(json.loads(text))
    assert isinstance(ledger.ended["sid-0"], Ended) and ledger.ended["sid-0"].exit_code == 0
    assert ledger.ended["sid-0"].attempts == [Attempt.from_dict({"attempt": 0, "state": "lost"})]
    assert ledger.ended["sid-0"].extra == {"zz": 1} and ledger.ended["sid-0"].state is None
    assert isinstance(ledger.forsaken["sid-9"], Forsaken)
    assert ledger.forsaken["sid-9"].agents == ["a2"] and ledger.forsaken["sid-9"].at == 998
    assert json.dumps(ledger.to_dict(), sort_keys=True) == text


def test_a_kept_read_reads_as_its_fields_and_writes_back_the_same_object():
    read = {"stored_at": 1000, "agent": {"name": "a1", "id": "n1/slot"}, "sessions": {}}
    read |= {"declared": None, "zz": [1]}
    data = {"version": 1, "sessions": {}, "agents": {"a1": read}}
    text = json.dumps(data, sort_keys=True)
    kept = document.Ledger.from_dict(json.loads(text)).agents["a1"]
    assert isinstance(kept, KeptRead) and kept.identity == "n1/slot"
    assert (kept.stored_at, kept.read_at, kept.images, kept.declared) == (1000, 0.0, {}, None)
    assert json.dumps({**data, "agents": {"a1": kept.to_dict()}}, sort_keys=True) == text
    assert KeptRead.from_dict({}).identity == ""


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"agents": {"a1": None}}, "kept read that is not an object"),
        ({"ended": {"sid": "gone"}}, "ended session that is not an object"),
        ({"forsaken": {"sid": ["a2"]}}, "forsaken session that is not an object"),
    ],
)
def test_a_damaged_ended_or_forsaken_record_makes_the_ledger_unreadable(data, says):
    with pytest.raises(LedgerError, match=says):
        document.Ledger.from_dict({"version": 1, "sessions": {}, **data})


@pytest.mark.parametrize(
    ("sessions", "says"),
    [
        ({"s": ["not", "an", "object"]}, "reservation that is not an object"),
        ({"s": {"kernels": {"main1": {}}}}, "kernels that are not a list"),
        ({"s": {"kernels": ["main1"]}}, "kernel that is not an object"),
    ],
)
def test_a_damaged_reservation_makes_the_ledger_unreadable_never_half_read(sessions, says):
    with pytest.raises(LedgerError, match=says):
        document.Ledger.from_dict({"version": 1, "sessions": sessions})


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_KEYS = st.sampled_from(
    [
        "name",
        "session_id",
        "state",
        "owner",
        "deadline",
        "attempt",
        "spec",
        "zz",
        "adopted",
        "parsed",
        "agents",
        "removed_at",
        "exit_code",
        "agent",
        "stored_at",
        "declared",
        "ends",
        "wait",
        "retries",
    ]
)


@given(st.dictionaries(_KEYS | st.text(), _JSON, max_size=8))
def test_any_object_without_kernels_round_trips_byte_for_byte(data):
    """Values are kept as read, never converted: the text written is the text read."""
    text = json.dumps(data, sort_keys=True)
    assert json.dumps(Reservation.from_dict(data).to_dict(), sort_keys=True) == text


@pytest.mark.parametrize("kind", [QueueEntry, Ended, Forsaken, KeptRead, Counters, Attempt])
@given(data=st.dictionaries(_KEYS | st.text(), _JSON, max_size=8))
def test_any_other_record_object_round_trips_byte_for_byte(kind, data):
    if kind is KeptRead:
        data.pop("agent", None)  # a nested record: the next test
    text = json.dumps(data, sort_keys=True)
    assert json.dumps(kind.from_dict(data).to_dict(), sort_keys=True) == text


@given(
    agent=st.dictionaries(_KEYS | st.text(), _JSON, max_size=8),
    data=st.dictionaries(_KEYS | st.text(), _JSON, max_size=8),
)
def test_a_kept_read_and_its_agent_round_trip_byte_for_byte(agent, data):
    """The agent of a kept read is a record of its own (AgentState), kept as read too."""
    data = {**data, "agent": agent}
    text = json.dumps(data, sort_keys=True)
    assert json.dumps(KeptRead.from_dict(data).to_dict(), sort_keys=True) == text
    with pytest.raises(LedgerError, match="read's agent that is not an object"):
        KeptRead.from_dict({"agent": None})


def test_the_counters_read_as_a_record_and_write_back_what_they_read_and_counted():
    data = {"version": 1, "sessions": {}, "counters": {"ends": {"batch/failed": 2}, "zz": 1}}
    text = json.dumps(data, sort_keys=True)
    ledger = document.Ledger.from_dict(json.loads(text))
    assert isinstance(ledger.counters, Counters) and ledger.counters.extra == {"zz": 1}
    assert json.dumps(ledger.to_dict(), sort_keys=True) == text
    counters.count_end(ledger, "batch", "failed")
    counters.count_retries(ledger, 2)
    counters.note_pass(ledger, "reconcile", 5.0)
    assert ledger.to_dict()["counters"] == {
        "ends": {"batch/failed": 3},
        "retries": 2,
        "reconcile": {"at": 5.0, "passes": 1},
        "zz": 1,
    }
    assert counters.read(document.empty())["ends"] == {}
    fresh = document.empty()  # what was never counted stays out of the document
    counters.count_restart(fresh, "lost")
    assert fresh.to_dict()["counters"] == {"restarts": {"lost": 1}}
