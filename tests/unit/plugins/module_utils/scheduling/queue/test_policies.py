"""Per-owner limits (scheduling/queue/policies.py): parsing bai_session_policies, the limits
that apply to an owner, what an owner holds, and the refusal that names the policy."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.policies import (
    Usage,
    lifetime,
    limits_for,
    parse_policies,
    refusal,
    usage,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import Resources
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import check_owner
from hypothesis import given
from hypothesis import strategies as st

GI = 1024**3
POLICIES = {
    "default": {"sessions": 4, "cpu": 32, "mem": "128g", "gpu": 4, "lifetime_s": 86400},
    "owners": {"alice": {"sessions": 1}, "bob": {"gpu": None}},
}


def entry(name, owner, cpu=1.0, mem=GI, gpu=0, size=1, state="ready"):
    kernels = [{"cpu": cpu, "mem": mem, "gpu": gpu} for _kernel in range(size)]
    return Reservation.from_dict({"name": name, "owner": owner, "state": state, "kernels": kernels})


def test_an_owner_overrides_the_default_key_by_key():
    parsed = parse_policies(POLICIES)
    alice = limits_for(parsed, "alice")
    assert alice.sessions.value == 1 and alice.sessions.source.endswith("owners.alice.sessions")
    assert alice.cpu.value == 32 and alice.cpu.source == "bai_session_policies.default.cpu"
    assert alice.mem.value == 128 * GI and alice.lifetime_s.value == 86400


def test_null_lifts_the_default_for_that_owner_and_absent_keys_mean_no_limit():
    parsed = parse_policies(POLICIES)
    assert limits_for(parsed, "bob").gpu is None
    assert limits_for(parsed, "carol").gpu.value == 4
    bare = limits_for(parse_policies({"owners": {"alice": {"sessions": 1}}}), "carol")
    assert (bare.sessions, bare.cpu, bare.mem, bare.gpu, bare.lifetime_s) == (None,) * 5
    assert limits_for(parse_policies(None), "anyone").sessions is None


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"defaults": {}}, "unknown key(s) defaults"),
        ({"default": {"gpus": 1}}, "bai_session_policies.default: unknown key(s) gpus"),
        ({"default": {"sessions": -1}}, "bai_session_policies.default.sessions: got -1"),
        ({"default": {"lifetime_s": 0}}, "would end every session at once"),
        ({"default": {"cpu": None}}, "leave the key out for no limit"),
        ({"owners": {"bad name": {}}}, "an owner is 1 to 64 letters"),
        ({"owners": {"default": {}}}, "'default' is not an owner"),
        ({"owners": ["alice"]}, "bai_session_policies.owners: expected a mapping"),
        ({"default": {"mem": "lots"}}, "bai_session_policies.default.mem"),
    ],
)
def test_bad_policies_are_refused_naming_the_field(raw, words):
    with pytest.raises(SpecError) as err:
        parse_policies(raw)
    assert words in str(err.value)


def test_usage_counts_the_owners_reserved_and_running_sessions_not_queued_ones():
    sessions = [
        entry("a1", "alice", cpu=2, size=2),
        entry("a2", "alice", gpu=1, state="creating"),
        entry("a3", "alice", cpu=8, state="queued"),
        entry("b1", "bob", cpu=4),
    ]
    held = usage(sessions, "alice")
    assert held == Usage(2, 5.0, 3 * GI, 1, ("a1", "a2"))


def test_a_refusal_names_the_policy_the_use_and_the_limit():
    limits = limits_for(parse_policies(POLICIES), "alice")
    held = usage([entry("it-a", "alice")], "alice")
    why = refusal(limits, held, "it-b", Resources(1, GI, 0))
    assert why == (
        "owner alice holds 1 session(s) (it-a); session it-b would make 2 session(s), more "
        "than the 1 session(s) that bai_session_policies.owners.alice.sessions allows"
    )
    assert refusal(limits, Usage(), "it-b", Resources(1, GI, 0)) == ""


def test_resources_are_summed_over_every_group_and_checked_key_by_key():
    limits = limits_for(parse_policies(POLICIES), "carol")
    held = usage([entry("c1", "carol", cpu=30, mem=100 * GI, gpu=3)], "carol")
    assert "more than the 32 CPU" in refusal(limits, held, "c2", Resources(3, GI, 0))
    assert "more than the 128g" in refusal(limits, held, "c2", Resources(1, 29 * GI, 0))
    assert "more than the 4 GPU" in refusal(limits, held, "c2", Resources(1, GI, 2))
    assert refusal(limits, held, "c2", Resources(2, 28 * GI, 1)) == ""


def test_lifetimes_longer_than_the_policy_are_refused_and_none_gets_the_policys():
    limits = limits_for(parse_policies(POLICIES), "alice")
    assert "longer than the 86400 s" in refusal(limits, Usage(), "x", Resources(1, GI, 0), 90000)
    assert lifetime(limits, 0) == 86400 and lifetime(limits, 600) == 600
    assert lifetime(limits_for(parse_policies(None), "x"), 0) == 0


def test_owner_names():
    assert check_owner("alice.b@lab-1") == "alice.b@lab-1"
    for bad in ("", "-x", "a b", "x" * 65, 3, None):
        with pytest.raises(SpecError, match="session_owner"):
            check_owner(bad)


@given(
    limit=st.integers(0, 6),
    held=st.lists(st.sampled_from([0.5, 1, 2]), max_size=6),
    ask=st.sampled_from([0.5, 1, 2, 4]),
)
def test_a_session_is_allowed_exactly_when_the_owner_stays_within_every_limit(limit, held, ask):
    parsed = parse_policies({"default": {"sessions": limit, "cpu": 6}})
    sessions = [entry(f"s{i}", "u", cpu=c) for i, c in enumerate(held)]
    now = usage(sessions, "u")
    allowed = refusal(limits_for(parsed, "u"), now, "new", Resources(ask, GI, 0)) == ""
    assert allowed == (len(held) + 1 <= limit and sum(held) + ask <= 6 + 1e-6)
