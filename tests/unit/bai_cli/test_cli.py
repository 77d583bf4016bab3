"""bai-cluster CLI: argument parsing, the extravars it builds, failure -> exit code, the
ssh command per connection type, and what it prints. No Ansible run, no Docker."""

from __future__ import annotations

import json

import pytest

from bai_cli import __main__ as cli
from bai_cli import api, runner
from bai_cli.commands.session_options import create_spec
from bai_cli.commands.session_text import details_text, session_text
from bai_cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_PENDING,
    BaiClusterError,
    classify,
)
from bai_cli.runner import Failure, PlaybookResult


def parse(*argv: str):
    own, remote = cli.split_remote(argv)
    args = cli.build_parser().parse_args(own)
    args.remote = remote
    return args


# --- parsing --------------------------------------------------------------------------
def test_create_options_become_the_playbook_variables():
    args = parse(
        "-i",
        "inventories/local",
        "session",
        "create",
        "s1",
        "-n",
        "3",
        "--mode",
        "multi-node",
        "--image",
        "bai/session:latest",
        "-g",
        "gpu",
        "--cpu",
        "0.5",
        "--mem",
        "512m",
        "--gpu",
        "1",
        "--mount",
        "/srv/bai-data/s1:/home/work/data",
        "--mount",
        "/srv/ro:/mnt/ro:ro",
        "--env",
        "A=1",
        "-e",
        "B=x=y",
        "--wait",
        "30",
        "--ssh-timeout",
        "20",
        "--mtu",
        "1400",
    )
    assert args.inventory == "inventories/local"
    extravars = api.create_extravars(args.name, args.size, **create_spec(args))
    assert extravars == {
        "session_name": "s1",
        "session_size": 3,
        "session_mode": "multi-node",
        "session_image": "bai/session:latest",
        "session_resource_group": "gpu",
        "session_resources": {"cpu": 0.5, "mem": "512m", "gpu": 1},
        "session_mounts": [
            {"src": "/srv/bai-data/s1", "dst": "/home/work/data"},
            {"src": "/srv/ro", "dst": "/mnt/ro", "readonly": True},
        ],
        "session_env": {"A": "1", "B": "x=y"},
        "session_wait_s": 30.0,
        "session_ssh_timeout_s": 20,
        "session_network_mtu": 1400,
    }


def test_unset_options_are_left_to_the_playbook_defaults():
    args = parse("session", "create", "s1")
    assert api.create_extravars(args.name, args.size, **create_spec(args)) == {"session_name": "s1"}


def test_global_options_work_after_the_subcommand_too():
    args = parse("session", "list", "--json", "-i", "inventories/local", "-vv")
    assert (args.json, args.inventory, args.verbose) == (True, "inventories/local", 2)
    args = parse("--json", "session", "list")
    assert args.json is True and not hasattr(args, "inventory")


def test_roles_parse_into_session_roles():
    args = parse(
        "session",
        "create",
        "h1",
        "--role",
        "main=1",
        "--role",
        "worker=2,image=bai/session:latest,cpu=2,mem=1g,gpu=0",
    )
    assert create_spec(args)["roles"] == [
        {"role": "main", "replicas": 1},
        {
            "role": "worker",
            "replicas": 2,
            "image": "bai/session:latest",
            "resources": {"cpu": 2, "mem": "1g", "gpu": 0},
        },
    ]


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("--env", "NOEQUALS", "KEY=VALUE"),
        ("--mount", "/only-src", "SRC:DST"),
        ("--mount", "/a:/b:rx", "ro or rw"),
        ("--role", "worker", "KEY=VALUE"),
        ("--role", "worker=2,colour=red", "unknown key"),
        ("--signal", "USR1", "SIG@SECONDS"),
        ("--signal", "KILL@60", "one of HUP"),
        ("--signal", "USR1@0", "--signal (its SECONDS): got 0"),
    ],
)
def test_malformed_options_exit_2_before_anything_runs(option, value, needle, capsys, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("no playbook may run for bad command-line input")

    monkeypatch.setattr(runner, "run_playbook", must_not_run)
    assert cli.main(["session", "create", "s1", option, value]) == EXIT_BAD_INPUT
    assert needle in capsys.readouterr().err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["session", "create", "s1", "--mode", "sideways"])
    assert exc.value.code == EXIT_BAD_INPUT
    assert "invalid choice" in capsys.readouterr().err


def test_a_command_after_double_dash_is_for_ssh_only():
    args = parse("session", "ssh", "s1", "sub1", "--", "hostname", "-f")
    assert (args.name, args.host, args.remote) == ("s1", "sub1", ["hostname", "-f"])
    args = parse("session", "ssh", "s1", "--", "hostname")
    assert (args.host, args.remote) == (None, ["hostname"])
    with pytest.raises(SystemExit):
        cli.main(["session", "list", "--", "hostname"])


# --- failure -> exit code ---------------------------------------------------------------
def result(*failures: Failure, placement: dict | None = None, rc: int = 2) -> PlaybookResult:
    ok = {"Place the session on the agents": [placement]} if placement else {}
    status = "failed" if rc else "successful"
    return PlaybookResult(rc, status, {}, list(failures), ok)


def test_success_is_no_error():
    assert classify(result(rc=0)) is None


def test_spec_check_failure_is_bad_input():
    error = classify(
        result(Failure("Check the session request", "localhost", "invalid session spec: size"))
    )
    assert (error.kind, error.exit_code, error.step) == ("bad_input", EXIT_BAD_INPUT, "check")
    assert str(error) == (
        "invalid session spec: size (step: check, task: Check the session request)"
    )


def test_destroy_name_check_is_bad_input():
    error = classify(result(Failure("Check the session name", "localhost", "session_name ...")))
    assert error.exit_code == EXIT_BAD_INPUT


def test_pending_placement_exits_3():
    msg = "session s: PENDING: container main1 needs cpu 64"
    error = classify(
        result(
            Failure("Stop when the session cannot be placed (nothing was changed)", "lh", msg),
            placement={"msg": msg, "pending": True, "permanent": True},
        )
    )
    assert (error.kind, error.exit_code, error.step) == ("pending", EXIT_PENDING, "placing")


def test_conflict_and_placement_spec_errors_differ():
    stop = "Stop when the session cannot be placed (nothing was changed)"
    conflict = classify(
        result(
            Failure(stop, "lh", "already exists with a different spec"),
            placement={"conflict": True, "msg": "x"},
        )
    )
    assert (conflict.kind, conflict.exit_code) == ("conflict", EXIT_FAILED)
    missing = classify(
        result(Failure(stop, "lh", "mounts[0].src: /x does not exist"), placement={"msg": "x"})
    )
    assert (missing.kind, missing.exit_code) == ("bad_input", EXIT_BAD_INPUT)


def test_failure_part_way_names_the_first_step_and_the_final_message():
    error = classify(
        result(
            Failure("Create the containers on their agent", "localhost", "image not found"),
            Failure(
                "Report the failure",
                "localhost",
                "session s was not created: image not found (everything made for it was removed)",
            ),
        )
    )
    assert (error.kind, error.exit_code) == ("failed", EXIT_FAILED)
    assert (error.step, error.task) == ("containers", "Create the containers on their agent")
    assert "everything made for it was removed" in error.message


def test_ignored_failures_do_not_count():
    ignored = Failure("Remove the networks this run made", "lh", "x", ignored=True)
    assert classify(result(ignored, rc=0)) is None


def test_errors_outside_tasks_use_the_last_error_line():
    run = PlaybookResult(
        4, "failed", {}, [], {}, output_tail="noise\nERROR! the playbook: x.yml could not be found"
    )
    error = classify(run)
    assert error.exit_code == EXIT_FAILED
    assert error.message == "ERROR! the playbook: x.yml could not be found"


def test_unreachable_host_is_a_plain_failure():
    error = classify(
        result(Failure("Read capacity", "agent1", "no such container", unreachable=True))
    )
    assert error.kind == "unreachable" and error.exit_code == EXIT_FAILED
    assert error.message == (
        "agent1 did not answer (its connection failed). Ansible said: no such container"
    )


@pytest.mark.parametrize(
    ("said", "how"),
    [
        (
            "Module result deserialization failed: No start of json char found",
            "its node gave no answer: the machine or its engine is gone",
        ),
        (
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the "
            "docker daemon running?",
            "its Docker engine does not answer",
        ),
    ],
)
def test_an_agent_that_does_not_answer_is_named_with_how_and_what_went_on(said, how):
    task = "Read the session containers on this agent"
    run = result(Failure(task, "agent2", said))
    run.ok_results[task] = [{"agent": "agent1"}]
    error = classify(run)
    assert (error.kind, error.exit_code) == ("unreachable", EXIT_FAILED)
    assert error.message == (
        f"agent2 did not answer ({how}); the run went on with the 1 other host(s) that "
        f"answered. Ansible said: {said}"
    )
    assert error.task == task


def test_cli_prints_one_error_line_and_json(monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise BaiClusterError("pending", "session s: PENDING: no room", "placing", "Stop when")

    monkeypatch.setattr(api, "create_session", fail)
    assert cli.main(["--json", "session", "create", "s", "-n", "2"]) == EXIT_PENDING
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "error: session s: PENDING: no room (step: placing, task: Stop when)"
    ]
    assert json.loads(out)["error"] == {
        "kind": "pending",
        "message": "session s: PENDING: no room",
        "step": "placing",
        "task": "Stop when",
        "exit_code": EXIT_PENDING,
    }


# --- show / env / ssh ---------------------------------------------------------------
def show_stats(connection: str, host: str) -> dict:
    def container(name, hostname, role, idx, kid, ports=None):
        return {
            "name": name,
            "agent": "agent1",
            "state": "running",
            "image": "bai/session:latest",
            "labels": {
                "ai.backend.cluster.host": hostname,
                "ai.backend.cluster.role": role,
                "ai.backend.cluster.idx": str(idx),
                "ai.backend.cluster.kernel-id": kid,
                "ai.backend.cluster.session-id": "K1",
                "ai.backend.cluster.mode": "single-node",
            },
        }

    return {
        "name": "s1",
        "containers": [
            container("bai-s1-sub1", "sub1", "sub", 1, "K2"),
            container("bai-s1-main1", "main1", "main", 1, "K1"),
        ],
        "networks": [
            {"bai-s1-net": {"IPAddress": "10.224.0.3"}},
            {"bai-s1-net": {"IPAddress": "10.224.0.2"}},
        ],
        "ports": [None, {"2200/tcp": [{"HostIp": "0.0.0.0", "HostPort": "30004"}]}],
        "env": {
            "bai-s1-sub1": "PATH=/bin\nBACKENDAI_CLUSTER_HOST=sub1\nMASTER_PORT=29500\n"
            'TF_CONFIG={"task": {"index": 1}}\nHOME=/root'
        },
        "access": {
            "agent1": {"connection": connection, "host": host, "user": "", "port": ""},
            "appproxy": {"connection": "ssh", "host": "proxy.example", "user": "ops", "port": ""},
        },
        "appproxy": "appproxy",
    }


def test_show_stats_become_details():
    details = api.details_from_stats(show_stats("local", "localhost"))
    assert [c.host for c in details.containers] == ["main1", "sub1"]
    main1 = details.container()
    assert main1.addresses == {"bai-s1-net": "10.224.0.2"}
    assert main1.ports == {"2200/tcp": ["0.0.0.0:30004"]}
    assert (details.session_id, details.ssh_port, details.network) == ("K1", 30004, "bai-s1-net")
    assert details.state == "running"
    assert details.env == {
        "sub1": {
            "BACKENDAI_CLUSTER_HOST": "sub1",
            "MASTER_PORT": "29500",
            "TF_CONFIG": '{"task": {"index": 1}}',
        }
    }


def test_show_names_the_open_app_routes_of_this_session_only():
    stats = {
        **show_stats("local", "localhost"),
        "app_address": "10.210.1.12",
        "app_routes": [
            {"session": "s1", "session_id": "K1", "app": "jupyter", "port": 10206},
            # Left by an earlier session of the name: it leads nowhere.
            {"session": "s1", "session_id": "K0", "app": "tb", "port": 10207},
        ],
    }
    details = api.details_from_stats(stats)
    assert details.app_routes == [{"app": "jupyter", "port": 10206, "address": "10.210.1.12"}]
    text = "\n".join(details_text(details))
    assert (
        "app jupyter open through the app proxy at https://10.210.1.12:10206/ "
        "(its link: bai-cluster session app s1 jupyter)"
    ) in text
    assert "tb" not in text
    assert details.to_dict()["app_routes"] == details.app_routes


def test_show_gives_each_member_s_domain_when_the_cluster_has_a_topology():
    plain = "\n".join(details_text(api.details_from_stats(show_stats("local", "localhost"))))
    assert "TOPOLOGY" not in plain
    where = {"agent1": {"block": "b1", "rack": "r3"}, "agent2": {}}
    details = api.details_from_stats({**show_stats("local", "localhost"), "topology": where})
    assert details.topology == {"agent1": {"block": "b1", "rack": "r3"}}
    lines = details_text(details)
    header = next(line for line in lines if "HOST" in line)
    assert header.split()[:5] == ["HOST", "ROLE", "STATE", "AGENT", "TOPOLOGY"]
    main1 = next(line for line in lines if line.strip().startswith("main1"))
    assert main1.split()[3:5] == ["agent1", "block=b1,rack=r3"]


def test_topology_reaches_the_playbook_and_a_bad_level_is_refused_first(monkeypatch, capsys):
    assert cli.main(["session", "create", "s1", "-n", "2", "--topology", "Rack"]) == (
        EXIT_BAD_INPUT
    )
    assert "--topology: got 'Rack'" in capsys.readouterr().err
    seen = {}

    def fake_run(playbook, extravars, **kwargs):
        seen.update(extravars)
        return PlaybookResult(rc=2, status="failed", stats={}, failures=[], ok_results={})

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    cli.main(["session", "run", "j", "-n", "2", "--topology", "rack", "--", "true"])
    assert seen["session_topology"] == "rack"
    cli.main(["session", "create", "s1", "-n", "2", "--topology", "rack", "--prefer", "20"])
    assert seen["session_topology_prefer_s"] == 20
    assert cli.main(["session", "create", "s1", "-n", "2", "--prefer", "20"]) == EXIT_BAD_INPUT
    assert "--prefer: got 20, but the session names no topology level" in (capsys.readouterr().err)
    assert api.create_extravars("s1", 2, topology="block")["session_topology"] == "block"


def test_show_of_a_missing_session_is_not_found():
    with pytest.raises(BaiClusterError) as exc:
        api.details_from_stats({"name": "ghost", "containers": []})
    assert exc.value.kind == "not_found" and "ghost" in exc.value.message


def test_unknown_host_is_bad_input():
    details = api.details_from_stats(show_stats("local", "localhost"))
    with pytest.raises(BaiClusterError) as exc:
        details.container("sub9")
    assert exc.value.exit_code == EXIT_BAD_INPUT and "main1, sub1" in exc.value.message


def test_ssh_on_this_machine_is_docker_exec():
    details = api.details_from_stats(show_stats("local", "localhost"))
    cmd = api.shell_command(details, "sub1")
    assert cmd.runnable
    assert cmd.argv == [
        "docker",
        "exec",
        "-it",
        "-u",
        "work",
        "-w",
        "/home/work",
        "bai-s1-sub1",
        "bash",
        "-l",
    ]


def test_ssh_in_the_lab_goes_through_the_agent_node():
    details = api.details_from_stats(show_stats("community.docker.docker", "bai-lab-agent1"))
    cmd = api.shell_command(details, None, ["hostname"], tty=False)
    assert cmd.runnable
    assert cmd.argv == [
        "docker",
        "exec",
        "-i",
        "bai-lab-agent1",
        "docker",
        "exec",
        "-i",
        "-u",
        "work",
        "-w",
        "/home/work",
        "bai-s1-main1",
        "bash",
        "-c",
        "hostname",
    ]


def test_a_command_runs_through_the_shell_as_with_ssh():
    """``session ssh S sub1 -- 'cd /tmp; pwd'`` runs the line in a shell (it used to be
    exec'd as one program named 'cd /tmp; pwd')."""
    details = api.details_from_stats(show_stats("community.docker.docker", "bai-lab-agent1"))
    cmd = api.shell_command(details, "sub1", ["cd /tmp;", "pwd"], tty=False)
    assert cmd.argv[-3:] == ["bash", "-c", "cd /tmp; pwd"]


def test_ssh_on_real_hosts_is_printed_through_the_app_proxy():
    details = api.details_from_stats(show_stats("ssh", "10.0.3.21"))
    cmd = api.shell_command(details, "sub1")
    assert not cmd.runnable
    assert str(cmd) == "ssh -t -J ops@proxy.example -p 30004 work@10.0.3.21 ssh -t sub1"
    assert "app proxy" in cmd.note
    with_command = api.shell_command(details, "sub1", ["cd /tmp; pwd"])
    # main1's shell gets the second hop with the line quoted, so both commands run on sub1.
    assert with_command.argv[-4:] == ["ssh", "-t", "sub1", "'cd /tmp; pwd'"]


def test_env_output_is_shell_quoted(monkeypatch, capsys):
    details = api.details_from_stats(show_stats("local", "localhost"))
    monkeypatch.setattr(api, "session_env", lambda *a, **k: details.env)
    assert cli.main(["session", "env", "s1", "sub1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "BACKENDAI_CLUSTER_HOST=sub1",
        "MASTER_PORT=29500",
        """TF_CONFIG='{"task": {"index": 1}}'""",
    ]


def test_create_summary_text():
    session = api.Session.from_summary(
        {
            "name": "s1",
            "session_id": "K1",
            "mode": "single-node",
            "network": "bai-s1-net",
            "network_driver": "bridge",
            "containers": [
                {
                    "host": "main1",
                    "role": "main",
                    "idx": 1,
                    "agent": "agent1",
                    "kernel_id": "K1",
                    "container": "bai-s1-main1",
                },
                {
                    "host": "sub1",
                    "role": "sub",
                    "idx": 1,
                    "agent": "agent1",
                    "kernel_id": "K2",
                    "container": "bai-s1-sub1",
                },
            ],
            "action": "create",
            "ssh_port": 30004,
            "ssh_agent": "agent1",
        }
    )
    text = "\n".join(session_text(session))
    assert text.splitlines()[0] == "session s1 created"
    assert "single-node, 2 container(s), network bai-s1-net (bridge)" in text
    assert "main1  main  1    agent1  bai-s1-main1  K1" in text
    assert "published on agent1 port 30004" in text
    assert session.to_dict()["size"] == 2


def test_rerun_summary_says_what_it_started_again():
    session = api.Session.from_summary(
        {
            "name": "s1",
            "session_id": "K1",
            "mode": "single-node",
            "network": None,
            "network_driver": None,
            "containers": [],
            "action": "exists",
            "restarted": ["bai-s1-sub1"],
        }
    )
    first = session_text(session)[0]
    assert first == (
        "session s1 already exists with this spec; started again what had stopped: bai-s1-sub1"
    )


def test_reconcile_runs_its_playbook_in_check_mode_and_prints_what_it_did(monkeypatch, capsys):
    seen = {}

    def fake_run(playbook, extravars, **kwargs):
        seen.update(playbook=playbook, check=kwargs.get("check"))
        stats = {
            "bai_reconcile": {
                "adopted": ["s1"],
                "remove": [{"agent": "a1", "session": "s2", "session_id": "id2", "containers": 1}],
                "rebuilt": "missing",
            }
        }
        return PlaybookResult(rc=0, status="successful", stats=stats, failures=[], ok_results={})

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    assert cli.main(["session", "reconcile", "--check"]) == 0
    assert seen == {"playbook": api.RECONCILE, "check": True}
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "check mode: nothing was changed; a run would do this:",
        "the ledger was rebuilt from the agents' labels (missing)",
        "adopted (run on the agents, now in the ledger): s1",
        "removed 1 container(s) of incomplete session s2 (id2) on a1",
    ]


def test_reconcile_adopts_another_ledger_by_id_and_reports_foreign_sessions(monkeypatch, capsys):
    seen = {}

    def fake_run(playbook, extravars, **kwargs):
        seen.update(extravars)
        stats = {"bai_reconcile": {"foreign": ["s3 (ledger old-id)"], "ledger_ids": ["new-id"]}}
        return PlaybookResult(rc=0, status="successful", stats=stats, failures=[], ok_results={})

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    argv = ["session", "reconcile", "--adopt-ledger", "old-id", "--adopt-ledger", "older"]
    assert cli.main(argv) == 0
    # The command runs the scheduler pass itself: the playbook's own is off.
    assert seen == {"session_adopt_ledgers": ["old-id", "older"], "session_schedule_after": False}
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "left alone, another session ledger counts them (if that ledger is gone for good: "
        "reconcile --adopt-ledger ID): s3 (ledger old-id)"
    ]


# --- the queue ------------------------------------------------------------------------
def test_queue_becomes_session_queue_and_run_needs_detach(capsys):
    args = parse("session", "create", "s1", "--queue")
    assert api.create_extravars(args.name, args.size, **create_spec(args))["session_queue"]
    assert cli.main(["session", "run", "s1", "--queue", "--", "true"]) == EXIT_BAD_INPUT
    assert "--queue needs --detach" in capsys.readouterr().err


def test_preemptible_needs_restarts_and_detach_and_reaches_the_playbook(monkeypatch, capsys):
    assert cli.main(["session", "run", "j", "--preemptible", "--detach", "--", "true"]) == (
        EXIT_BAD_INPUT
    )
    assert "--preemptible needs --restarts" in capsys.readouterr().err
    seen = {}

    def fake_run(playbook, extravars, **kwargs):
        seen.update(extravars)
        return PlaybookResult(rc=2, status="failed", stats={}, failures=[], ok_results={})

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    argv = ["session", "run", "j", "--restarts", "1", "--preemptible", "--detach", "--", "true"]
    cli.main(argv)
    assert (seen["session_preemptible"], seen["session_restarts"]) == (True, 1)


def test_a_queued_create_prints_its_place_and_reason(monkeypatch, capsys):
    queued = {
        "name": "s2", "state": "PENDING", "owner": "alice", "resource_group": "default",
        "mode": "single-node", "size": 2, "type": "interactive", "submitted_at": 10.0,
        "position": 1, "reason": "waits behind s1",
    }  # fmt: skip

    def fake_run(playbook, extravars, **kwargs):
        assert extravars["session_queue"] is True
        return PlaybookResult(
            rc=0, status="successful", stats={"bai_session": queued}, failures=[], ok_results={}
        )

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    assert cli.main(["session", "create", "s2", "-n", "2", "--queue"]) == 0
    out = capsys.readouterr().out
    assert "session s2 is PENDING: number 1 in the queue of resource group default" in out
    assert "waits: waits behind s1" in out and "bai-cluster session destroy s2" in out


def answering(monkeypatch, *stats: dict) -> list[str]:
    """run_playbook replaced by successful runs that answer with ``stats``, the first run
    with the first: the playbooks run, in order."""
    runs: list[str] = []

    def fake_run(playbook, extravars, **kwargs):
        runs.append(playbook)
        return PlaybookResult(
            rc=0, status="successful", stats=stats[len(runs) - 1], failures=[], ok_results={}
        )

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    return runs


def test_schedule_runs_the_pass_again_while_more_would_start(monkeypatch, capsys):
    answers = [
        ({"start": ["a"], "more": 1, "waiting": 3, "queue": []}, {"name": "a", "action": "create"}),
        ({"start": ["b"], "more": 0, "waiting": 2, "queue": [{"name": "c", "reason": "r"}]},
         {"name": "b", "action": "create"}),
    ]  # fmt: skip
    runs = answering(
        monkeypatch, *({"bai_schedule": decided, "bai_session": made} for decided, made in answers)
    )
    assert cli.main(["session", "schedule"]) == 0
    assert runs == [api.SCHEDULE, api.SCHEDULE]
    assert capsys.readouterr().out.splitlines() == [
        "queued sessions started: a, b",
        "still queued (PENDING): 1, first c (r)",
    ]


def test_schedule_says_which_sessions_it_preempted_and_for_whom(monkeypatch, capsys):
    preempted = {"session": "high", "victims": ["low"], "reason": "preempted for high (p)"}
    decided = {"start": ["high"], "more": 0, "waiting": 2, "queue": [{"name": "low"}]}
    stats = {
        "bai_schedule": decided,
        "bai_session": {"name": "high", "action": "create"},
        "bai_preempted": {**preempted, "rows": [], "lead_s": 0, "at": 1.0},
    }
    answering(monkeypatch, stats)
    assert cli.main(["session", "schedule"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "low: preempted for high (p)",
        "queued sessions started: high",
        "still queued (PENDING): 1, first low (waiting)",
    ]


def test_schedule_runs_the_pass_again_to_start_what_a_preemption_made_room_for(monkeypatch, capsys):
    # The run that preempts starts nothing and counts the session in more; the next starts it.
    preempted = {"session": "high", "victims": ["low"], "reason": "preempted for high (p)"}
    answers = [
        (
            {"start": [], "more": 1, "waiting": 2, "queue": [{"name": "high"}]},
            {"bai_preempted": {**preempted, "rows": [], "lead_s": 0, "at": 1.0}},
        ),
        (
            {"start": ["high"], "more": 0, "waiting": 2, "queue": [{"name": "low"}]},
            {"bai_session": {"name": "high", "action": "create"}},
        ),
    ]
    runs = answering(monkeypatch, *({"bai_schedule": decided, **more} for decided, more in answers))
    assert cli.main(["session", "schedule"]) == 0
    assert runs == [api.SCHEDULE, api.SCHEDULE]
    assert capsys.readouterr().out.splitlines() == [
        "low: preempted for high (p)",
        "queued sessions started: high",
        "still queued (PENDING): 1, first low (waiting)",
    ]
