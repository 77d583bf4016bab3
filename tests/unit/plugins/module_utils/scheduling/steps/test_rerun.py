"""A rerun of a create that finds its session whole (module_utils/scheduling/steps/rerun.py): the
plan the controller takes from the agents' reads is the plan the ledger's second answer
gives, for every key the playbooks use; anything short of whole leaves it to the ledger.

The flow is the playbook's: reserve without reads (asks for them), the reads, reserve with
them, confirm; then the rerun: reserve without reads (asks, with the entry), the reads, and
both the controller's plan and the ledger's second answer."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_LEDGER
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    reservations,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.rerun import rerun_plan
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.reserve import reserve
from availability_fake import AGENTS, read

# What session_make.yml and session_create.yml read of a plan.
USED = (
    "action", "agents", "kernels", "mode", "network", "ready", "session_id", "spec",
    "ssh_port", "summary", "deadline", "spec_hash", "requested_mode", "size",
)  # fmt: skip


def reads_with(plan, state="running", **changes):
    """Each agent's read showing the plan's containers in ``state``."""
    out = {a["name"]: read(a["name"]) for a in AGENTS}
    for k in plan["kernels"]:
        row = {
            "agent": k["agent"],
            "name": k["container_name"],
            "state": state,
            "image": k["image"],
            "labels": {**k["labels"], **changes},
            "ports": {},
        }
        out[k["agent"]]["containers"].append(row)
    return list(out.values())


def made(spec, now=1000.0):
    """The session made through the ledger as a create makes it; the ledger and its plan."""
    ledger = document.empty()
    first = reserve(LedgerRequest(spec=spec, agents=AGENTS), ledger, now)
    assert first["need_read"]
    fresh = [read(a["name"]) for a in AGENTS]
    plan = reserve(LedgerRequest(spec=spec, agents=AGENTS, agent_info=fresh), ledger, now + 1)
    assert plan["action"] == "create"
    reservations.mark_ready(ledger, spec["name"], plan["session_id"], now + 5)
    return ledger, plan


def rerun(ledger, spec, reads, now=2000.0):
    """The rerun's first answer (with ids, as the module adds them), the controller's plan
    from ``reads``, and the ledger's own second answer."""
    answer = {
        **reserve(LedgerRequest(spec=spec, agents=AGENTS), ledger, now),
        "ledger_ids": ["L1"],
    }
    mine = rerun_plan(spec, reads, answer)
    theirs = reserve(LedgerRequest(spec=spec, agents=AGENTS, agent_info=reads), ledger, now + 1)
    return answer, mine, theirs


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "s1", "size": 2, "resources": {"cpu": 1}},
        {"name": "s2", "size": 2, "mode": "multi-node", "resources": {"cpu": 3}},
        {"name": "s3", "size": 1, "lifetime_s": 600, "end_signal": "USR1@60", "owner": "erin"},
        {
            "name": "s4",
            "size": 3,
            "type": "batch",
            "command": "hostname",
            "env": {"K": "V"},
            "resources": {"cpu": 1},
        },
    ],
)
def test_a_whole_sessions_rerun_plan_is_the_ledgers_second_answer(spec):
    ledger, plan = made(spec)
    reads = reads_with(plan)
    answer, mine, theirs = rerun(ledger, spec, reads)
    assert answer["rerun"]["session_id"] == plan["session_id"]
    assert sorted(answer["need_read"]) == sorted(plan["agents"])
    assert mine is not None and theirs["action"] == "exists" and theirs["ready"]
    assert {k: mine.get(k) for k in USED} == {k: theirs.get(k) for k in USED}
    assert mine["reservation"] == {**theirs["reservation"], "name": spec["name"]}
    assert mine["ledger_ids"] == ["L1"] and not mine["changed"]


def test_anything_short_of_whole_is_left_to_the_ledger():
    spec = {"name": "s1", "size": 2, "mode": "multi-node", "resources": {"cpu": 3}}
    ledger, plan = made(spec)
    answer = {**reserve(LedgerRequest(spec=spec, agents=AGENTS), ledger, 2000.0), "ledger_ids": []}
    whole = reads_with(plan)
    assert rerun_plan(spec, whole, answer) is not None
    # A container stopped; one gone; another instance; another ledger's; a read missing
    # or failed; another request of the same name; no entry in the answer.
    stopped = reads_with(plan, state="exited")
    gone = copy.deepcopy(whole)
    gone[0]["containers"] = []
    other = reads_with(plan, **{"ai.backend.cluster.session-id": "another"})
    foreign = reads_with(plan, **{LABEL_LEDGER: "L9"})
    failed = [whole[0], {**whole[1], "failed": True}]
    for reads in (stopped, gone, other, foreign, whole[:1], failed):
        assert rerun_plan(spec, reads, answer) is None
    assert rerun_plan({**spec, "size": 3}, whole, answer) is None
    assert rerun_plan(spec, whole, {**answer, "rerun": None}) is None


def test_only_a_confirmed_session_is_answered_as_a_rerun():
    spec = {"name": "s1", "size": 1, "resources": {"cpu": 1}}
    ledger = document.empty()
    reserve(LedgerRequest(spec=spec, agents=AGENTS), ledger, 1000.0)
    fresh = [read(a["name"]) for a in AGENTS]
    reserve(LedgerRequest(spec=spec, agents=AGENTS, agent_info=fresh), ledger, 1001.0)
    # Still being created (another run): read, and the ledger decides.
    again = reserve(LedgerRequest(spec=spec, agents=AGENTS), ledger, 1002.0)
    assert "rerun" not in again
