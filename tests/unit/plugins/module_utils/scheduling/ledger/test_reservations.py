"""Reservations (module_utils/scheduling/ledger/reservations.py): confirmed, released, and a
creating one past its expiry settled by what its agents run."""

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    reservations,
)
from ledger_fake import (
    dead_create,
    info,
    place,
    reads_of,
    seen,
)


def test_a_creating_reservation_expires_and_frees_its_share():
    ledger = document.empty()
    place(ledger, "dead", [info("a1", cpu=4)], now=1000.0, size=1, resources={"cpu": 4})
    with pytest.raises(Pending):
        place(ledger, "next", [info("a1", cpu=4)], now=1030.0, size=1, resources={"cpu": 4})
    place(ledger, "next", [info("a1", cpu=4)], now=1061.0, size=1, resources={"cpu": 4})
    assert sorted(ledger.sessions) == ["next"]


def test_a_ready_reservation_does_not_expire():
    ledger = document.empty()
    place(ledger, "s1", [info("a1", cpu=4)], size=1, resources={"cpu": 4})
    sid = ledger.sessions["s1"].session_id
    assert reservations.mark_ready(ledger, "s1", sid, 1001.0)
    assert not reservations.mark_ready(ledger, "s1", sid, 1002.0)  # once
    assert reservations.expire(ledger, 10**9, reads_of([info("a1")])) == reservations.Expiry(
        [], [], []
    )


def test_release_is_limited_to_the_runs_own_session():
    ledger = document.empty()
    place(ledger, "s1", [info("a1")], size=1)
    assert not reservations.release(ledger, "s1", "another-run")
    assert not reservations.mark_ready(ledger, "s1", "another-run", 1001.0)
    assert "s1" in ledger.sessions
    assert reservations.release(ledger, "s1")
    assert not reservations.release(ledger, "s1")


@pytest.mark.parametrize(
    ("found", "outcome"),
    [(0, "dropped"), (2, "adopted"), (1, "stuck")],
)
def test_an_expired_reservation_is_settled_by_what_its_agents_run(found, outcome):
    """Case 1: past its expiry a reservation is dropped only when a fresh read shows its
    create left nothing; all of it makes the session (adopted), part of it keeps counting
    until reconcile removes it."""
    ledger = document.empty()
    sid = dead_create(ledger)
    read = info("a1", cpu=8, read_at=1061.0, sessions=seen(sid, found) if found else {})
    done = reservations.expire(ledger, 1061.0, reads_of([read]))
    assert getattr(done, outcome) == ["dead"]
    assert ("dead" in ledger.sessions) == (outcome != "dropped")
    if outcome == "adopted":
        assert ledger.sessions["dead"].state == document.READY


def test_an_expired_reservation_keeps_counting_until_its_agents_are_read():
    ledger = document.empty()
    dead_create(ledger)
    # no read: not checked
    assert reservations.expire(ledger, 1061.0) == reservations.Expiry([], [], [])
    kept = {**info("a1", cpu=8, read_at=1061.0), "kept": True}
    # a kept read
    assert reservations.expire(ledger, 1061.0, reads_of([kept])) == reservations.Expiry([], [], [])
    older = info("a1", cpu=8, read_at=999.0)  # read before it was reserved
    assert reservations.expire(ledger, 1061.0, reads_of([older])) == reservations.Expiry([], [], [])
    assert "dead" in ledger.sessions
    with pytest.raises(Pending):  # it still holds its share
        kept = {**info("a1", cpu=2), "kept": True}
        place(ledger, "next", [kept], now=1061.0, size=1, resources={"cpu": 1})
