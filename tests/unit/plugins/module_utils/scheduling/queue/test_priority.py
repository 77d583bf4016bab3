"""The queue's priority (module_utils/scheduling/queue/priority.py): FIFO with one owner, fair
share moves a heavy owner back, decay brings them forward again, and the running-usage
integral never counts a session twice."""

from __future__ import annotations

import math

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import priority as prio
from hypothesis import given
from hypothesis import strategies as st

H = 7 * prio.DAY_S


def test_decay_halves_the_usage_every_half_life():
    assert prio.decayed(100.0, 0.0, H, H) == 50.0
    assert prio.decayed(100.0, 0.0, 3 * H, H) == 12.5
    assert prio.decayed(100.0, 10.0, 5.0, H) == 100.0  # a clock behind counts nothing


def test_the_running_integral_matches_a_numeric_one():
    rate, started, now = 4.0, 0.0, 3 * prio.DAY_S
    steps = 20000
    dt = (now - started) / steps
    numeric = sum(rate * dt * 2 ** (-(now - (started + (i + 0.5) * dt)) / H) for i in range(steps))
    assert math.isclose(prio.accrued(rate, started, now, H), numeric, rel_tol=1e-6)


@given(
    st.floats(min_value=0.01, max_value=100),
    st.floats(min_value=0, max_value=30 * prio.DAY_S),
    st.floats(min_value=0, max_value=30 * prio.DAY_S),
)
def test_charging_at_the_end_equals_what_ran_then_decays_alike(rate, ran, later):
    """A session charged at its end with its integral counts, later, exactly what it
    would have counted had it kept accruing and stopped: no double count, no gap."""
    end = ran
    records = prio.charge({}, "alice", prio.accrued(rate, 0.0, end, H), end, H)
    then = prio.usage(records, [], end + later, H).units.get("alice", 0.0)
    # The integral from 0 to end, decayed to end + later.
    expected = prio.decayed(prio.accrued(rate, 0.0, end, H), end, end + later, H)
    if expected >= prio.NEGLIGIBLE_UNITS * 2 ** (later / H):
        assert math.isclose(then, expected, rel_tol=1e-9, abs_tol=1e-9)


@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=1e6), st.integers(0, 1000)),
        min_size=2,
        max_size=20,
        unique_by=lambda t: t[1],
    ),
    st.floats(min_value=0, max_value=1e5),
    st.booleans(),
)
def test_one_owner_keeps_submission_order_whatever_the_usage(entries, used, weighted):
    weights = prio.Weights() if weighted else prio.Weights(fairshare=0, priority=0)
    found = prio.Usage({"alice": used})
    now = 2e6
    keyed = []
    for submitted, seq in entries:
        f = prio.factors(now - submitted, "alice", found, {"alice": 1.0}, 0, weights)
        keyed.append(
            (prio.order_key(f.priority, False, submitted, seq, f"s{seq}"), (submitted, seq))
        )
    by_priority = [fifo for _key, fifo in sorted(keyed)]
    assert by_priority == sorted(by_priority)


def test_fair_share_moves_a_heavy_owner_back_and_decay_brings_them_forward():
    now = 100 * prio.DAY_S
    records = prio.charge({}, "heavy", 1e6, now, H)
    shares = {"heavy": 1.0, "light": 1.0}
    found = prio.usage(records, [], now, H)
    # heavy submitted an hour earlier than light.
    heavy = prio.factors(3600 * 2, "heavy", found, shares)
    light = prio.factors(3600, "light", found, shares)
    assert light.fairshare == 1.0 and heavy.fairshare == 0.25  # used 1.0 of a 0.5 share
    assert light.priority > heavy.priority
    # Ten half-lives on, with light having used a little meanwhile: heavy's use is
    # nearly gone, but it is still the larger share of everyone's: light stays ahead
    # until the two have used alike.
    later = now + 10 * H
    records = prio.charge(records, "light", 1e3, later, H)
    found = prio.usage(records, [], later, H)
    heavy = prio.factors(3600 * 2, "heavy", found, shares)
    light = prio.factors(3600, "light", found, shares)
    assert heavy.fairshare > 0.4 and light.fairshare > 0.25
    assert abs(heavy.fairshare - light.fairshare) < 0.2


def test_negligible_records_are_dropped_when_charged():
    records = prio.charge({}, "old", 1.0, 0.0, H)
    records = prio.charge(records, "new", 5.0, 20 * H, H)
    assert set(records) == {"new"}


def test_the_explicit_priority_and_its_weight():
    found = prio.Usage()
    low = prio.factors(0, "a", found, {"a": 1, "b": 1}, explicit=0)
    high = prio.factors(0, "b", found, {"a": 1, "b": 1}, explicit=50)
    assert (low.explicit, high.explicit) == (0.0, 0.5)
    assert high.priority - low.priority == 500.0
    # A restart's gang stays first whatever its priority.
    assert prio.order_key(0, True, 9, 9, "x") < prio.order_key(1e9, False, 0, 0, "y")
