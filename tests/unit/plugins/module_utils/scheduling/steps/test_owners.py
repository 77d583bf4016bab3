"""Owners (session_owner): in the spec but not its hash, on every label, in the ledger's
entry, in list's rows (and its --owner filter), and the CLI's error kind for a refusal by
the owner's limits."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_OWNER
from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import (
    format_table,
    summarize_sessions,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import reservations
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
    spec_canonical,
    spec_hash,
)

from bai_cli import __main__ as cli
from bai_cli import api, runner
from bai_cli.commands.session_options import create_spec
from bai_cli.errors import EXIT_PENDING, classify
from bai_cli.runner import Failure, PlaybookResult

GI = 1024**3


def spec(**raw):
    return normalize_spec({"name": "s1", "size": 2, **raw})


def test_the_owner_is_in_the_spec_but_not_in_its_hash():
    mine, theirs, nobody = spec(owner="alice"), spec(owner="bob"), spec()
    assert spec_canonical(mine)["owner"] == "alice" and "owner" not in spec_canonical(nobody)
    assert spec_hash(mine) == spec_hash(theirs) == spec_hash(nobody)
    assert normalize_spec(spec_canonical(mine)) == mine  # the canonical form round-trips
    with pytest.raises(SpecError, match="session_owner: got 'a b'"):
        spec(owner="a b")


def test_every_label_and_the_ledger_entry_carry_the_owner():
    plan = plan_session(spec(owner="alice"), [Agent("a1", "default", 4, 8 * GI, 0)])
    assert {k.labels[LABEL_OWNER] for k in plan.kernels} == {"alice"}
    assert plan.network.labels[LABEL_OWNER] == "alice"
    entry = reservations.reservation(plan, now=1.0, ttl=60)
    assert entry.owner == "alice"
    unowned = plan_session(spec(), [Agent("a1", "default", 4, 8 * GI, 0)])
    assert all(LABEL_OWNER not in k.labels for k in unowned.kernels)


def test_list_rows_give_the_owner_and_the_table_a_column():
    plan = plan_session(spec(owner="alice"), [Agent("a1", "default", 4, 8 * GI, 0)])
    rows = summarize_sessions(
        [
            {"agent": "a1", "name": k.container_name, "state": "running", "labels": k.labels}
            for k in plan.kernels
        ]
    )
    assert rows[0]["owner"] == "alice"
    assert format_table(rows)[1].split()[4] == "alice"


def test_session_list_owner_keeps_only_that_owners_sessions(monkeypatch, capsys):
    def row(name, owner):
        return {
            "name": name, "session_id": f"id-{name}", "size": 1, "found": 1, "running": 1,
            "mode": "single-node", "resource_group": "default", "agents": ["a1"],
            "hosts": ["main1"], "state": "running", "owner": owner,
        }  # fmt: skip

    def fake_run(playbook, extravars, **kwargs):
        stats = {"bai_sessions": [row("s1", "alice"), row("s2", "bob"), row("s3", "")]}
        return PlaybookResult(rc=0, status="successful", stats=stats, failures=[], ok_results={})

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    assert cli.main(["session", "list", "--owner", "bob"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["NAME", "SESSION-ID", "SIZE", "MODE", "OWNER"]
    assert [line.split()[0] for line in out[1:]] == ["s2"]
    assert cli.main(["session", "list", "--owner", "carol"]) == 0
    assert capsys.readouterr().out.strip() == "no sessions of carol"


def test_create_owner_becomes_session_owner():
    args = cli.build_parser().parse_args(["session", "create", "s1", "-n", "1", "--owner", "al"])
    assert api.create_extravars("s1", 1, **create_spec(args))["session_owner"] == "al"
    args = cli.build_parser().parse_args(["session", "create", "s1", "-n", "1"])
    assert "session_owner" not in api.create_extravars("s1", 1, **create_spec(args))


def test_a_refusal_by_the_owners_limits_is_kind_policy_exit_3():
    stop = "Stop when the session cannot be placed (nothing was changed)"
    msg = "refused by the owner's limits: owner alice holds 1 session(s) (s0); ..."
    run = PlaybookResult(
        2,
        "failed",
        {},
        [Failure(stop, "localhost", msg)],
        {"Place the session on the agents": [{"msg": msg, "policy": True}]},
    )
    error = classify(run)
    assert (error.kind, error.exit_code) == ("policy", EXIT_PENDING)
