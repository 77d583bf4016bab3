"""scheduling/queue/fair_usage.py: each owner's usage in the ledger, charged when a session ends
(through the ledger's state=absent step, as a destroy makes it), never twice, decayed."""

from __future__ import annotations

import math

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    reservations,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    fair_usage,
    priority,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import by_state as steps
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerRequest,
)
from hypothesis import given
from hypothesis import strategies as st
from ledger_fake import info, place

GI = 1024**3
HALF = priority.Weights().half_life_s


def running_session(ledger, name, owner, cpu, at, mem="1g"):
    """A session of 2 containers of ``cpu`` CPUs and ``mem`` each, confirmed at ``at``."""
    place(
        ledger,
        name,
        [info("a1", cpu=64, mem_g=256)],
        now=at,
        size=2,
        owner=owner,
        resources={"cpu": cpu, "mem": mem},
    )
    entry = ledger.sessions[name]
    entry.owner = owner  # what reservation() takes from the plan's spec
    reservations.mark_ready(ledger, name, entry.session_id, at)
    return entry


def destroy(ledger, name, now):
    sid = ledger.sessions[name].session_id if name in ledger.sessions else "gone"
    request = LedgerRequest(state="absent", name=name, session_id=sid)
    return steps.released(request, ledger, now)


def test_the_rate_counts_cpus_memory_and_gpus_of_every_container():
    entry = document.Reservation.from_dict(
        {"kernels": [{"cpu": 2, "mem": 4 * GI, "gpu": 1}, {"cpu": 1, "mem": 0, "gpu": 0}]}
    )
    assert fair_usage.rate_of(entry) == pytest.approx(2 + 4 * 0.25 + 10 + 1)


def test_a_destroy_charges_its_owner_what_the_session_used():
    ledger = document.Ledger.empty()
    entry = running_session(ledger, "s1", "ann", cpu=1, at=1000.0)
    rate = fair_usage.rate_of(entry)
    assert rate == pytest.approx(2 * (1 + 0.25))
    destroy(ledger, "s1", 4600.0)  # an hour later
    record = ledger.usage["ann"]
    assert record["at"] == 4600.0
    assert record["units"] == pytest.approx(priority.accrued(rate, 1000.0, 4600.0, HALF))
    assert record["units"] == pytest.approx(rate * 3600, rel=3e-3)  # an hour decays 0.2%
    # Run again, the destroy finds nothing to release and charges nothing.
    destroy(ledger, "s1", 8200.0)
    assert ledger.usage["ann"]["units"] == record["units"]


def test_a_reservation_never_confirmed_charges_nothing():
    ledger = document.Ledger.empty()
    place(ledger, "dead", [info("a1", cpu=8)], now=1000.0, size=1)
    ledger.sessions["dead"].owner = "bob"
    destroy(ledger, "dead", 5000.0)
    assert not ledger.usage  # nothing ran: no record at all
    assert "usage" not in ledger.to_dict()


def test_usage_survives_the_document_and_decays_with_the_half_life():
    ledger = document.Ledger.empty()
    running_session(ledger, "s1", "ann", cpu=2, at=0.0)
    destroy(ledger, "s1", 600.0)
    again = document.loads(document.dumps(ledger))
    assert again.usage == ledger.usage
    units = ledger.usage["ann"]["units"]
    later = fair_usage.current(again, 600.0 + HALF)
    assert later.units["ann"] == pytest.approx(units / 2)


def test_records_too_small_to_matter_are_dropped_so_the_record_stays_bounded():
    ledger = document.Ledger.empty()
    ledger.usage = {"old": {"units": 1.0, "at": 0.0}}
    running_session(ledger, "s1", "ann", cpu=1, at=30 * HALF)
    destroy(ledger, "s1", 30 * HALF + 60)
    assert set(ledger.usage) == {"ann"}  # 2**-30 of a unit is gone


@given(
    ran=st.floats(1.0, 30 * 86400.0),
    earlier=st.floats(0.0, 1e6),
    cpu=st.sampled_from([0.5, 1.0, 4.0]),
)
def test_an_end_moves_usage_from_running_to_the_record_without_a_jump(ran, earlier, cpu):
    """The owner's usage just before a destroy (running) equals the usage just after it
    (recorded): a session is never counted twice nor missed."""
    ledger = document.Ledger.empty()
    ledger.usage = {"ann": {"units": earlier, "at": 0.0}} if earlier else None
    running_session(ledger, "s1", "ann", cpu=cpu, at=1000.0)
    now = 1000.0 + ran
    before = fair_usage.current(ledger, now).units["ann"]
    destroy(ledger, "s1", now)
    after = fair_usage.current(ledger, now).units["ann"]
    assert not ledger.sessions
    assert math.isclose(before, after, rel_tol=1e-9, abs_tol=1e-9)
