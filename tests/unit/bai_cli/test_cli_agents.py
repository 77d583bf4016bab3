"""bai-cluster agent ...: the playbook each command runs with which variables, what it
prints (text and --json) and its exit code. The playbook runner is replaced by a fake
that returns set_stats data shaped like the agent playbooks'; no Ansible run, no Docker."""

from __future__ import annotations

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_view
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.availability import (
    describe_json as describe,
)

from bai_cli import __main__ as cli
from bai_cli import api
from bai_cli.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from bai_cli.runner import Failure, PlaybookResult

GIB = 1024**3
AT = 1_795_000_000.0
PAUSED = {
    "availability": "pause",
    "name": "agent2",
    "id": "N2",
    "by": "alice",
    "reason": "driver upgrade",
    "at": AT,
}
DRAINED = {**PAUSED, "availability": "drain", "reason": "kernel update"}


def agent_rows() -> list[dict]:
    """Two agents as agent_list.yml records them (agent_view.rows, as its filter does)."""

    def read(identity, used_cpu, gpu_in_use, sessions):
        return {
            "agent": {
                "id": identity,
                "cpu": 8.0,
                "mem": 16 * GIB,
                "gpu_devices": [0, 1],
                "used_cpu": used_cpu,
                "used_mem": 2 * GIB,
                "gpu_in_use": gpu_in_use,
            },
            "sessions": {f"k-{name}": {"name": name} for name in sessions},
        }

    return agent_view.rows(
        [{"name": "agent2", "group": "gpu"}, {"name": "agent1", "group": "default"}],
        {"agent1": read("N1", 1.0, [0], ["s1"]), "agent2": read("N2", 2.0, [], ["s2", "s3"])},
        {"records": {"N2": PAUSED}},
    )


class FakeRunner:
    """Stands in for bai_cli.runner.run_playbook: records each call, returns ``result``."""

    def __init__(self, result: PlaybookResult) -> None:
        self.result = result
        self.calls: list[tuple[str, dict, dict]] = []

    def __call__(self, playbook, extravars=None, **kwargs):
        self.calls.append((playbook, dict(extravars or {}), kwargs))
        return self.result


def ok(stats: dict) -> PlaybookResult:
    return PlaybookResult(rc=0, status="successful", stats=stats, failures=[], ok_results={})


def failed(task: str, msg: str, stats: dict | None = None) -> PlaybookResult:
    return PlaybookResult(2, "failed", stats or {}, [Failure(task, "localhost", msg)], {})


@pytest.fixture
def runner(monkeypatch):
    def install(result: PlaybookResult) -> FakeRunner:
        fake = FakeRunner(result)
        monkeypatch.setattr("bai_cli.runner.run_playbook", fake)
        return fake

    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    return install


# --- list / show ------------------------------------------------------------------------
def test_list_runs_agent_list_for_every_agent_and_prints_the_table(runner, capsys):
    rows = agent_rows()
    fake = runner(ok({"bai_agents": rows, "bai_agent_totals": agent_view.totals(rows)}))
    assert cli.main(["agent", "list", "-i", "inventories/local"]) == EXIT_OK
    [(playbook, extravars, kwargs)] = fake.calls
    assert (playbook, extravars) == (api.AGENT_LIST, {})
    assert kwargs["inventory"] == "inventories/local"
    out = capsys.readouterr().out.splitlines()
    assert out == agent_view.table(rows)
    assert out[0].split()[:5] == ["AGENT", "ID", "GROUP", "AVAILABILITY", "HEALTH"]
    assert out[1].startswith("agent1") and "active" in out[1]
    assert out[2].startswith("agent2") and "paused" in out[2]
    assert out[-1] == f"agent2: {describe(PAUSED)}"


def test_list_json_is_the_rows_and_the_totals(runner, capsys):
    rows = agent_rows()
    totals = agent_view.totals(rows)
    runner(ok({"bai_agents": rows, "bai_agent_totals": totals}))
    assert cli.main(["agent", "list", "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data == {"agents": rows, "totals": totals}
    assert [row["in_service"] for row in data["agents"]] == [True, False]
    assert data["totals"]["in_service"] == 1


def test_list_of_an_inventory_without_agents(runner, capsys):
    runner(ok({"bai_agents": [], "bai_agent_totals": agent_view.totals([])}))
    assert cli.main(["agent", "list"]) == EXIT_OK
    assert capsys.readouterr().out == "no agents in this inventory\n"


def test_show_names_the_agent_and_prints_its_details(runner, capsys):
    row = agent_rows()[1]
    fake = runner(ok({"bai_agents": [row], "bai_agent_totals": agent_view.totals([row])}))
    assert cli.main(["agent", "show", "agent2"]) == EXIT_OK
    assert fake.calls[0][:2] == (api.AGENT_LIST, {"agent_name": "agent2"})
    out = capsys.readouterr().out.splitlines()
    assert out == agent_view.details(row)
    assert f"availability: {describe(PAUSED)}" in out
    assert "sessions:     s2, s3" in out


def test_show_json_is_the_row(runner, capsys):
    row = agent_rows()[0]
    runner(ok({"bai_agents": [row], "bai_agent_totals": agent_view.totals([row])}))
    assert cli.main(["--json", "agent", "show", "agent1"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == row


def test_an_agent_the_inventory_lacks_is_bad_input(runner, capsys):
    runner(failed("Check the agent name", "no agent agent9 in this inventory; its agents: agent1"))
    assert cli.main(["agent", "show", "agent9"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "error: no agent agent9 in this inventory" in err
    assert "(step: check, task: Check the agent name)" in err


# --- pause / activate -------------------------------------------------------------------
def availability_stats(availability: str, record: dict | None, told: bool = True) -> dict:
    return {
        "bai_agent_availability": {
            "name": "agent2",
            "id": "N2",
            "availability": availability,
            "record": record,
            "told_agent": told,
            "node": None,
            "sessions": [
                {"name": "s2", "session_id": "K2", "containers": ["bai-s2-main1"], "states": []},
                {"name": "s3", "session_id": "K3", "containers": ["bai-s3-main1"], "states": []},
            ],
        }
    }


def test_pause_passes_the_reason_and_who_runs_it(runner, capsys):
    fake = runner(ok(availability_stats("pause", PAUSED)))
    argv = ["agent", "pause", "agent2", "--reason", "driver upgrade"]
    assert cli.main(argv) == EXIT_OK
    [(playbook, extravars, _kwargs)] = fake.calls
    assert playbook == api.AGENT_AVAILABILITY
    assert extravars == {
        "agent_name": "agent2",
        "agent_availability": "pause",
        "agent_reason": "driver upgrade",
        "agent_by": "alice",
    }
    assert capsys.readouterr().out.splitlines() == [
        f"agent agent2: {describe(PAUSED)}",
        "  sessions there (they keep running; a rerun still repairs them): s2, s3",
        "  no new sessions there until: bai-cluster agent activate agent2",
    ]
    assert describe(PAUSED).startswith("paused by alice at ")
    assert describe(PAUSED).endswith(": driver upgrade")


def test_pause_without_a_reason_leaves_it_to_the_playbook(runner):
    fake = runner(ok(availability_stats("pause", {**PAUSED, "reason": ""})))
    assert cli.main(["agent", "pause", "agent2"]) == EXIT_OK
    assert "agent_reason" not in fake.calls[0][1]


def test_pause_of_an_agent_that_did_not_answer_says_so(runner, capsys):
    runner(ok(availability_stats("pause", PAUSED, told=False)))
    assert cli.main(["agent", "pause", "agent2"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "the agent did not answer: recorded in the cluster only" in out


def test_activate(runner, capsys):
    fake = runner(ok(availability_stats("active", None)))
    assert cli.main(["agent", "activate", "agent2"]) == EXIT_OK
    assert fake.calls[0][:2] == (
        api.AGENT_AVAILABILITY,
        {"agent_name": "agent2", "agent_availability": "active", "agent_by": "alice"},
    )
    assert capsys.readouterr().out.splitlines() == [
        "agent agent2: active",
        "  sessions there: s2, s3",
    ]


def test_pause_json(runner, capsys):
    runner(ok(availability_stats("pause", PAUSED)))
    assert cli.main(["agent", "pause", "agent2", "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data == availability_stats("pause", PAUSED)["bai_agent_availability"]


def test_activate_of_an_agent_that_does_not_answer_fails(runner, capsys):
    msg = "agent agent2 did not answer (timeout), so its own record still refuses new sessions"
    runner(failed("Fail when the agent's own record could not be cleared", msg))
    assert cli.main(["agent", "activate", "agent2", "--json"]) == EXIT_FAILED
    out, err = capsys.readouterr()
    assert msg in err
    assert json.loads(out)["error"]["exit_code"] == EXIT_FAILED


def test_an_unknown_availability_is_refused_before_anything_runs(monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("no playbook may run for bad input")

    monkeypatch.setattr("bai_cli.runner.run_playbook", must_not_run)
    with pytest.raises(api.BaiClusterError) as exc:
        api.set_agent_availability("agent1", "paused")
    assert exc.value.exit_code == EXIT_BAD_INPUT


# --- drain --------------------------------------------------------------------------------
def drain_stats(left: list[str], forced: bool) -> dict:
    stats = {
        **availability_stats("drain", DRAINED),
        "bai_agent_drain": {"name": "agent2", "left": left, "forced": forced},
    }
    if forced:
        stats["bai_sessions_destroyed"] = [
            {
                "name": name,
                "session_id": f"K-{name}",
                "containers": [f"bai-{name}-main1", f"bai-{name}-sub1"],
                "networks": [f"bai-{name}-net"],
                "missed": [],
                "unlisted": [],
                "release": True,
            }
            for name in left
        ]
    return stats


def drain_vars(timeout: int, force: bool, **more) -> dict:
    """The extra vars of agent drain (and of agent remove, which drains first) for agent2,
    run by alice: the wait, whether to force, and what else the command passes."""
    return {
        "agent_name": "agent2",
        "agent_drain_timeout_s": timeout,
        "agent_drain_force": force,
        **more,
        "agent_by": "alice",
        "session_schedule_after": False,
    }


def test_drain_defaults_and_a_clean_drain(runner, capsys):
    fake = runner(ok(drain_stats([], forced=False)))
    assert cli.main(["agent", "drain", "agent2"]) == EXIT_OK
    [(playbook, extravars, _kwargs)] = fake.calls
    assert playbook == api.AGENT_DRAIN
    assert extravars == drain_vars(600, False)
    assert capsys.readouterr().out.splitlines() == [
        f"agent agent2: {describe(DRAINED)}",
        "  no sessions left on it",
        "  no new sessions there until: bai-cluster agent activate agent2",
    ]


def test_drain_with_force_names_each_session_destroyed(runner, capsys):
    fake = runner(ok(drain_stats(["s2", "s3"], forced=True)))
    argv = ["agent", "drain", "agent2", "--timeout", "30", "--force", "--reason", "kernel update"]
    assert cli.main(argv) == EXIT_OK
    assert fake.calls[0][1] == drain_vars(30, True, agent_reason="kernel update")
    assert capsys.readouterr().out.splitlines() == [
        f"agent agent2: {describe(DRAINED)}",
        "  2 session(s) still there after the wait, destroyed (--force):",
        "  destroyed session s2: 2 container(s)",
        "  destroyed session s3: 2 container(s)",
        "  no new sessions there until: bai-cluster agent activate agent2",
    ]


def test_drain_json(runner, capsys):
    stats = drain_stats(["s2"], forced=True)
    runner(ok(stats))
    assert cli.main(["agent", "drain", "agent2", "--force", "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert (data["name"], data["left"], data["forced"]) == ("agent2", ["s2"], True)
    assert data["destroyed"] == stats["bai_sessions_destroyed"]
    assert data["availability"]["record"] == DRAINED


def test_a_drain_that_leaves_sessions_fails_with_the_playbooks_message(runner, capsys):
    msg = (
        "agent agent2: 2 session(s) still hold it after 30 s: s2, s3. It stays drained (no new "
        "sessions). Wait longer, destroy them, or drain again with agent_drain_force=true "
        "(bai-cluster agent drain --force) to destroy them."
    )
    runner(failed("Fail when sessions remain", msg, drain_stats(["s2", "s3"], forced=False)))
    assert cli.main(["agent", "drain", "agent2", "--timeout", "30"]) == EXIT_FAILED
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {msg}")
    assert "s2, s3" in err and "stays drained" in err


def test_a_negative_drain_timeout_is_bad_input(runner, capsys):
    fake = runner(ok(drain_stats([], forced=False)))
    assert cli.main(["agent", "drain", "agent2", "--timeout", "-1"]) == EXIT_BAD_INPUT
    assert fake.calls == []
    assert "drain timeout" in capsys.readouterr().err


def test_drain_progress_shows_the_wait_and_each_change(runner, monkeypatch, capsys):
    task = "Read the sessions left on the agent (until none or the timeout)"

    def event(kind, sessions=None):
        res = {"sessions": [{"name": n} for n in sessions or []]}
        return {"event": kind, "event_data": {"task": task, "host": "agent2", "res": res}}

    events = [
        {"event": "playbook_on_task_start", "event_data": {"task": "Note who asks"}},
        event("playbook_on_task_start"),
        event("runner_retry", ["s3", "s2"]),
        event("runner_retry", ["s2", "s3"]),
        event("runner_retry", ["s3"]),
        event("runner_on_ok", []),
    ]

    def fake(playbook, extravars=None, *, on_event=None, **kwargs):
        for item in events:
            on_event(item)
        return ok(drain_stats([], forced=False))

    runner(ok({}))
    monkeypatch.setattr("bai_cli.runner.run_playbook", fake)
    assert cli.main(["agent", "drain", "agent2", "--timeout", "60"]) == EXIT_OK
    err = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert err == [
        "drain: waiting up to 60 s for the agent's sessions to end",
        "drain: agent2: 2 session(s) left: s2, s3",
        "drain: agent2: 1 session(s) left: s3",
        "drain: agent2: no sessions left",
    ]


def test_agent_commands_take_the_global_options_after_the_action():
    args = cli.build_parser().parse_args(
        ["agent", "drain", "agent1", "--json", "-i", "inventories/local", "-q", "--force"]
    )
    assert (args.command, args.action, args.name) == ("agent", "drain", "agent1")
    assert (args.json, args.inventory, args.quiet, args.force, args.timeout) == (
        True,
        "inventories/local",
        True,
        True,
        600,
    )


# --- session destroy --force (an agent that is down) ------------------------------------
def test_a_forced_destroy_passes_the_force_and_says_what_it_left_where(runner, capsys):
    done = {
        "name": "s1",
        "containers": ["bai-s1-main1"],
        "networks": ["bai-s1-net"],
        "missed": ["agent2"],
        "unlisted": [],
        "left_on": ["agent2"],
        "forced": True,
    }
    fake = runner(ok({"bai_session_destroyed": done}))
    assert cli.main(["session", "destroy", "s1", "--force"]) == EXIT_OK
    [(playbook, extravars, _kwargs)] = fake.calls
    assert playbook == api.DESTROY
    assert extravars == {
        "session_name": "s1",
        "session_destroy_force": True,
        "session_schedule_after": False,
    }
    out = capsys.readouterr().out
    assert out.startswith("session s1: removed 1 container(s) (bai-s1-main1)")
    assert "its part on agent2" in out and "session reconcile removes it" in out

    fake = runner(ok({"bai_session_destroyed": {**done, "left_on": []}}))
    assert cli.main(["session", "destroy", "s1", "--json"]) == EXIT_OK
    assert fake.calls[0][1] == {"session_name": "s1", "session_schedule_after": False}
    assert json.loads(capsys.readouterr().out)["left_on"] == []


# --- remove -----------------------------------------------------------------------------
def removed_stats(dead=False, ended=(), node=True) -> dict:
    stats: dict = {
        "bai_agent_removed": {
            "name": "agent2",
            "dead": dead,
            "node": {"id": "N2", "hostname": "agent2"} if node else None,
            "dropped": ["its kept read", "its availability record"] if node else [],
            "sessions_ended": list(ended),
        }
    }
    if ended:
        stats["bai_sessions_destroyed"] = [
            {"name": name, "containers": [f"bai-{name}-main1"], "networks": []} for name in ended
        ]
    return stats


def test_remove_drains_with_the_drain_s_options_and_says_what_comes_next(runner, capsys):
    fake = runner(ok(removed_stats()))
    assert cli.main(["agent", "remove", "agent2", "--timeout", "0"]) == EXIT_OK
    [(playbook, extravars, _kwargs)] = fake.calls
    assert playbook == api.AGENT_REMOVE
    assert extravars == drain_vars(0, False, agent_remove_dead=False)
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "agent agent2: out of the cluster",
        "  swarm node N2 removed",
        "  the session ledger dropped its kept read, its availability record",
    ]
    assert out[3].startswith("  next: take agent2 out of the inventory") and "site.yml" in out[3]


def test_remove_of_a_dead_agent_names_the_sessions_ended(runner, capsys):
    fake = runner(ok(removed_stats(dead=True, ended=["s2"])))
    assert cli.main(["agent", "remove", "agent2", "--dead", "--json"]) == EXIT_OK
    assert fake.calls[0][1]["agent_remove_dead"] is True
    data = json.loads(capsys.readouterr().out)
    assert data["dead"] is True and data["sessions_ended"] == ["s2"]
    assert data["destroyed"][0]["containers"] == ["bai-s2-main1"]


def test_a_second_remove_says_nothing_was_left(runner, capsys):
    runner(ok(removed_stats(node=False)))
    assert cli.main(["agent", "remove", "agent2"]) == EXIT_OK
    assert "  nothing of it was left (removed already)" in capsys.readouterr().out.splitlines()


def test_a_remove_refused_by_sessions_left_fails_with_the_drain_s_message(runner, capsys):
    msg = "agent agent2: 1 session(s) still hold it after 0 s: s2. It stays drained"
    runner(failed("Fail when sessions remain", msg))
    assert cli.main(["agent", "remove", "agent2", "--timeout", "0"]) == EXIT_FAILED
    assert "s2" in capsys.readouterr().err


def test_remove_of_an_agent_the_inventory_lacks_is_bad_input(runner, capsys):
    runner(failed("Check the agent to remove", "agent_name must be an agent of this inventory"))
    assert cli.main(["agent", "remove", "nope"]) == EXIT_BAD_INPUT


# --- agent check ------------------------------------------------------------------------
def checked(*failing: str, answered: bool = True) -> dict:
    """agent_check.yml's bai_agent_check for agent2, ``failing`` checks FAILED."""
    checks = [
        {"check": name, "status": "FAILED" if name in failing else "ok", "detail": f"{name} said"}
        for name in ("engine", "overlay", "data", "devices", "disk")
    ]
    return {
        "bai_agent_check": {
            "name": "agent2",
            "answered": answered,
            "healthy": answered and not failing,
            "failed": list(failing),
            "checks": checks if answered else [],
            "problem": "" if answered else "Failed to connect to the host via ssh",
        }
    }


def test_check_runs_the_playbook_reporting_only_and_prints_each_check(runner, capsys):
    fake = runner(ok(checked()))
    assert cli.main(["agent", "check", "agent2"]) == EXIT_OK
    assert fake.calls[0][:2] == (
        api.AGENT_CHECK,
        {"agent_name": "agent2", "agent_check_fail": False},
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "agent agent2: healthy"
    assert out[1] == "  engine   ok      engine said"
    assert len(out) == 6


def test_check_of_an_unhealthy_agent_names_the_failed_checks_and_exits_1(runner, capsys):
    runner(ok(checked("overlay", "disk")))
    assert cli.main(["agent", "check", "agent2"]) == EXIT_FAILED
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "agent agent2: not healthy (overlay, disk)"
    assert "  overlay  FAILED  overlay said" in out


def test_check_of_an_agent_that_does_not_answer_says_how(runner, capsys):
    runner(ok(checked(answered=False)))
    assert cli.main(["agent", "check", "agent2"]) == EXIT_FAILED
    assert capsys.readouterr().out == (
        "agent agent2: did not answer: Failed to connect to the host via ssh\n"
    )


def test_check_json_is_what_the_playbook_found(runner, capsys):
    runner(ok(checked("disk")))
    assert cli.main(["--json", "agent", "check", "agent2"]) == EXIT_FAILED
    done = json.loads(capsys.readouterr().out)
    assert (done["name"], done["healthy"], done["answered"]) == ("agent2", False, True)
    assert [c["check"] for c in done["checks"] if c["status"] == "FAILED"] == ["disk"]
