"""A create's plan (session/plan.py): the record plan_session makes, what the ledger's
answer adds to it, and the module's result it becomes."""

from __future__ import annotations

from dataclasses import replace

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_DEADLINE,
    LABEL_RESTART_COUNT,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
    spec_canonical,
    spec_hash,
)

GI = 1024**3
AGENTS = [Agent("a1", "default", 2, 8 * GI, 0), Agent("a2", "default", 2, 8 * GI, 0)]


def spec(**raw):
    return normalize_spec(
        {"name": "s1", "size": 3, "mode": "multi-node", "resources": {"cpu": 1}, **raw}
    )


def test_the_result_has_the_plan_s_keys_and_only_an_answer_adds_the_request():
    plan = plan_session(spec(), AGENTS)
    got = plan.to_dict()
    assert list(got) == [
        "action",
        "ready",
        "ssh_port",
        "session_id",
        "mode",
        "requested_mode",
        "spec_hash",
        "network",
        "agents",
        "kernels",
        "summary",
    ]
    assert (got["action"], got["network"]["driver"]) == ("create", "overlay")
    assert got["agents"] == list(plan.agents) and got["agents"][0] == plan.kernels[0].agent
    assert [c["host"] for c in got["summary"]["containers"]] == ["main1", "sub1", "sub2"]
    answer = plan.answering(spec(), read=["a1", "a2"], kept=[], unavailable=["a3"])
    extra = {k: v for k, v in answer.to_dict().items() if k not in got}
    assert extra == {
        "spec": spec_canonical(spec()),
        "size": 3,
        "read": ["a1", "a2"],
        "kept": [],
        "unavailable": ["a3"],
    }


def test_an_answer_takes_the_request_it_answers_and_its_hash():
    """A rerun answers with the ledger's lifetime: the spec and its hash are the answer's."""
    plan = replace(plan_session(spec(), AGENTS), spec_hash="other")
    longer = spec(lifetime_s=600)
    answer = plan.answering(longer, read=None, kept=None, unavailable=[])
    assert answer.spec is longer and answer.spec_hash == spec_hash(longer)
    assert answer.to_dict()["read"] is None and answer.to_dict()["spec"]["lifetime_s"] == 600
    assert plan.answered is None  # the plan itself is unchanged


def test_the_deadline_and_the_attempt_label_every_container():
    plan = plan_session(spec(), AGENTS)
    assert plan.with_deadline(None) is plan and plan.with_attempt(None) is plan
    made = plan.with_deadline(1601.0).with_attempt(2)
    assert {k.labels[LABEL_DEADLINE] for k in made.kernels} == {"1601.0"}
    assert {k.labels[LABEL_RESTART_COUNT] for k in made.kernels} == {"2"}
    assert (made.to_dict()["deadline"], made.to_dict()["attempt"]) == (1601.0, 2)
    assert all(LABEL_DEADLINE not in k.labels for k in plan.kernels)
