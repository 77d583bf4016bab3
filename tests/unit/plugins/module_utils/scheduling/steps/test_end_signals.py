"""The warning before a lifetime ends (session_end_signal, SIG@SECONDS) and the deadline
every container is told (BACKENDAI_SESSION_DEADLINE): parsed once, in the spec but not its
hash, on the labels, fixed in the ledger when the session is placed, kept by a ledger
rebuilt from the labels, and due at the first reconcile that finds at most SECONDS + 90
left, once."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_DEADLINE,
    LABEL_END_SIGNAL,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import reservations
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import (
    end_signals,
    reconcile,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.env import cluster_env
from ansible_collections.bai.cluster.plugins.module_utils.session.signal_names import (
    end_signal_parts,
    parse_end_signal,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
    spec_canonical,
    spec_hash,
)
from ansible_collections.bai.cluster.plugins.plugin_utils import ledger_text
from ansible_collections.bai.cluster.plugins.plugin_utils.repair_outcome import signal_outcome
from hypothesis import given
from hypothesis import strategies as st
from ledger_fake import ledger_of

GI = 1024**3


def spec(**raw):
    return normalize_spec({"name": "s1", "size": 2, "mode": "multi-node", **raw})


def planned(**raw):
    one = spec(**raw)
    return plan_session(
        one, [Agent("a1", "default", 1, 8 * GI, 0), Agent("a2", "default", 1, 8 * GI, 0)]
    )


def running(now=100.0, ready=101.0, **raw):
    """A session placed at ``now`` and running from ``ready``: its ledger."""
    plan = planned(**raw)
    entry = reservations.reservation(plan, now=now, ttl=900)
    ledger = ledger_of(sessions={"s1": entry})
    reservations.mark_ready(ledger, "s1", entry.session_id, ready)
    return ledger, entry


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("USR1@300", "USR1@300"), ("SIGUSR2@60", "USR2@60"), ("term@1", "TERM@1"), ("10@5", "USR1@5")],
)
def test_an_end_signal_is_a_signal_and_a_lead(given, canonical):
    assert parse_end_signal(given) == canonical
    assert end_signal_parts(canonical) == (canonical.split("@")[0], int(canonical.split("@")[1]))


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ("USR1", "expected SIG@SECONDS"),
        ("USR1@300@2", "expected SIG@SECONDS"),
        (300, "expected SIG@SECONDS"),
        ("KILL@300", "one of HUP"),
        ("USR1@0", "got 0"),
        ("USR1@86401", "got 86401"),
        ("USR1@5m", "got '5m'"),
    ],
)
def test_a_bad_end_signal_is_refused_naming_what_it_takes(given, needle):
    with pytest.raises(SpecError, match="end_signal") as info:
        parse_end_signal(given)
    assert needle in str(info.value)


def test_the_end_signal_is_in_the_spec_and_on_the_labels_but_not_in_the_hash():
    assert spec_hash(spec(end_signal="USR1@300")) == spec_hash(spec())
    assert spec(end_signal="SIGUSR1@300").end_signal == "USR1@300"
    assert spec_canonical(spec(end_signal="USR1@300"))["end_signal"] == "USR1@300"
    assert {k.labels[LABEL_END_SIGNAL] for k in planned(end_signal="USR1@9").kernels} == {"USR1@9"}
    assert all(LABEL_END_SIGNAL not in k.labels for k in planned().kernels)
    with pytest.raises(SpecError, match="end_signal"):
        spec(end_signal="USR1")


def sub1_env(kernels, **told):
    """The environment of session s1's second container (sub1), told ``told`` as well."""
    return cluster_env(
        kernels,
        kernels[1],
        session_name="s1",
        session_id="sid",
        kernel_id="kid",
        mode="multi-node",
        user_env={},
        image_env={},
        **told,
    )


def test_the_deadline_is_fixed_at_placement_and_reaches_every_containers_environment():
    plan = planned(lifetime_s=600, end_signal="USR1@300")
    entry = reservations.reservation(plan, now=1000.5, ttl=900)
    assert (entry.deadline, entry.end_signal) == (1601, "USR1@300")
    made = plan.with_deadline(entry.deadline)
    assert made.to_dict()["deadline"] == 1601
    assert {k.labels[LABEL_DEADLINE] for k in made.kernels} == {"1601"}
    one = normalize_spec({"name": "s1", "size": 2})
    kernels = expand_kernels(one)
    env = sub1_env(kernels, deadline=made.kernels[1].labels[LABEL_DEADLINE])
    assert env["BACKENDAI_SESSION_DEADLINE"] == "1601"
    assert "BACKENDAI_SESSION_DEADLINE" not in sub1_env(kernels)
    # Without a lifetime there is no deadline, and the plan is as it was.
    assert "deadline" not in reservations.reservation(planned(), now=1.0, ttl=9).to_dict()
    assert plan.with_deadline(None) is plan


def test_a_ledger_rebuilt_from_the_labels_keeps_the_deadline_and_the_end_signal():
    plan = planned(lifetime_s=600, end_signal="USR1@300").with_deadline(1601)
    rows = [
        ("a1", ContainerRow.of({"name": k.container_name, "labels": k.labels}))
        for k in plan.kernels
    ]
    entry = reconcile.adopted("s1", plan.session_id, rows, now=1500.0)
    assert (entry.deadline, entry.end_signal) == (1601, "USR1@300")
    # Rebuilt at 1500, it still ends at 1601: a rebuild does not give it a new lifetime.
    assert reservations.time_left(entry, 1500.0) == 101.0


def test_the_signal_is_due_once_at_most_its_lead_and_a_pass_before_the_end():
    ledger, entry = running(lifetime_s=1000, end_signal="USR1@300")
    assert entry.deadline == 1100
    # 1100 - 300 - 90 = 710: a pass at 709 is too early, one at 710 sends it.
    assert end_signals.EARLY_S == 90
    assert end_signals.due(ledger, 709.0) == []
    rows = end_signals.due(ledger, 710.0)
    assert rows == [
        {"agent": agent, "session": "s1", "session_id": entry.session_id, "signal": "USR1"}
        for agent in ("a1", "a2")
    ]
    assert entry.end_signal_at == 710.0
    assert end_signals.due(ledger, 800.0) == []  # once


def test_no_signal_without_one_asked_before_it_runs_or_once_the_lifetime_is_up():
    ledger, _entry = running(lifetime_s=1000)
    assert end_signals.due(ledger, 1099.0) == []
    plan = planned(lifetime_s=1000, end_signal="USR1@300")
    creating = reservations.reservation(plan, now=100.0, ttl=900)
    assert end_signals.due(ledger_of(sessions={"s1": creating}), 1000.0) == []
    up, entry = running(lifetime_s=1000, end_signal="USR1@300")
    assert end_signals.due(up, 1100.0) == [] and entry.end_signal_at is None


@given(st.integers(1, 86400), st.integers(1, 10**6), st.floats(0, 2e6))
def test_a_signal_that_is_due_never_comes_later_than_asked(lead, life, now):
    ledger, entry = running(now=0.0, ready=0.0, lifetime_s=life, end_signal=f"USR1@{lead}")
    rows = end_signals.due(ledger, now)
    left = reservations.time_left(entry, now)
    assert bool(rows) == bool(left and left <= lead + end_signals.EARLY_S)
    if rows:
        assert left is not None and left > 0


def test_a_reconcile_reports_the_signals_it_sent_and_those_it_could_not():
    rows = [
        {"agent": "a1", "session": "s1", "session_id": "i1", "signal": "USR1"},
        {"agent": "a2", "session": "s1", "session_id": "i1", "signal": "USR1"},
        {"agent": "a2", "session": "s2", "session_id": "i2", "signal": "TERM"},
    ]
    sent = {
        "a1": {"results": [{"item": rows[0], "members": {"s1-main1": {"processes": 2}}}]},
        "a2": {
            "results": [
                {"item": rows[1], "members": {"s1-sub1": {"processes": 1}}},
                {"item": rows[2], "members": {"s2-main1": {"error": "exit 3"}}},
            ]
        },
    }
    said = signal_outcome(rows, sent)
    assert said == {
        "end_signals": {"s1": "USR1"},
        "end_signal_failed": {"s2": "a2: s2-main1: exit 3"},
    }
    assert signal_outcome(rows[:1], {"a1": {"unreachable": True, "msg": "no route"}}) == {
        "end_signals": {},
        "end_signal_failed": {"s1": "a1: no route"},
    }
    lines = ledger_text.reconcile_lines({**said, "held": ["s1", "s2"]})
    assert lines == [
        "session s1: its end signal (USR1) sent to every member",
        "session s2: its end signal was not sent: a2: s2-main1: exit 3",
    ]
