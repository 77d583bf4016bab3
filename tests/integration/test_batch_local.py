"""Batch sessions on this machine's engine (-i inventories/local), run as a user runs them:
``bai-cluster session run NAME -- COMMAND`` as a subprocess, Ctrl-C as a signal to its
process group, a member killed with ``docker kill``, a command killed by the kernel for
memory. What is asserted is what the engine runs (containers and their state) and what
the command printed, not only what the toolkit says.

The gang checks are the real ones (module_utils/jobs/job.py: 2 s x 3 misses), so a member
stops about 6-8 s after main1 and the command about as long after a member dies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import REPO, ansible_playbook, bai_cli
from labtools import wait_for

pytestmark = pytest.mark.integration

CLI = REPO / ".venv" / "bin" / "bai-cluster"
LOCAL = "inventories/local"
LABEL = "ai.backend.cluster.session"


def cli(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return bai_cli(None, "-i", LOCAL, *argv, timeout=timeout)


def start(*argv: str) -> subprocess.Popen:
    """bai-cluster in its own process group (as a terminal runs it), output piped."""
    return subprocess.Popen(
        [str(CLI), "-i", LOCAL, *argv],
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: int = 300) -> tuple[str, str]:
    """The rest of stdout, then stderr, once it exits. Not communicate(): after a
    readline() the text wrapper may hold more than that line, which communicate (reading
    the pipes' descriptors) would never see."""
    out = proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout=timeout)
    return out, err


def containers(docker_client, name: str) -> dict[str, str]:
    """host -> Docker state of the session's containers on this engine."""
    found = docker_client.containers.list(all=True, filters={"label": f"{LABEL}={name}"})
    return {c.labels["ai.backend.cluster.host"]: c.status for c in found}


@pytest.fixture
def gone(docker_client):
    """Session names a test uses; destroyed afterwards when the engine still has any of
    their containers or networks (a destroy of a session that is gone costs a playbook)."""
    names: list[str] = []
    yield names
    for name in names:
        label = {"label": f"{LABEL}={name}"}
        if containers(docker_client, name) or docker_client.networks.list(filters=label):
            cli("session", "destroy", name)


def test_run_prints_the_output_as_it_comes_and_exits_with_the_code(docker_client, gone):
    name = "it-batch-code"
    gone.append(name)
    command = (
        'echo "first from $(hostname) in $PWD"; sleep 2; ssh sub1 hostname; '
        'echo "$BACKENDAI_CLUSTER_HOSTS $MASTER_ADDR:$MASTER_PORT"; exit 7'
    )
    began = time.monotonic()
    proc = start("session", "run", name, "-n", "2", "--cpu", "0.5", "--mem", "256m", "--", command)
    first = proc.stdout.readline()
    first_at = time.monotonic() - began
    # Printed as it comes: the first line is here while the command still sleeps.
    assert containers(docker_client, name).get("main1") == "running", first
    rest, err = finish(proc)
    ended_at = time.monotonic() - began
    assert proc.returncode == 7, err
    assert first == "first from main1 in /home/work\n"
    assert rest.splitlines() == ["sub1", "main1,sub1 main1:29500"], rest
    assert "failed, exit code 7" in err, err
    assert containers(docker_client, name) == {}
    print(f"local: first output line {first_at:.1f} s after session run; all done {ended_at:.1f} s")

    # Its output outlives it; show says how it ended.
    logs = cli("session", "logs", name)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == first + rest
    show = cli("--json", "session", "show", name)
    assert show.returncode == 0, show.stderr
    job = json.loads(show.stdout)["job"]
    assert (job["state"], job["exit_code"], job["failed"]["host"]) == ("failed", 7, "main1")
    assert job["members"] == {"main1": "localhost", "sub1": "localhost"}


def test_a_failure_inside_a_pipe_fails_the_session(docker_client, gone):
    name = "it-batch-pipe"
    gone.append(name)
    run = cli("session", "run", name, "-n", "1", "--mem", "256m", "--", "false | cat; ")
    # pipefail: the line's last pipeline failed, so the command did.
    assert run.returncode == 1, run.stderr
    assert "failed, exit code 1" in run.stderr
    assert containers(docker_client, name) == {}


def test_a_command_killed_for_memory_is_reported_with_the_oom_flag(docker_client, gone):
    name = "it-batch-oom"
    gone.append(name)
    hog = "head -c 1G /dev/zero | tail > /dev/null"
    run = cli("--json", "session", "run", name, "-n", "2", "--mem", "128m", "--", hog)
    assert run.returncode == 137, run.stderr
    job = json.loads(run.stdout)
    assert (job["state"], job["signal"]) == ("failed", "SIGKILL")
    assert job["failed"]["host"] == "main1" and job["failed"]["oom_killed"] is True, job


def test_a_member_killed_while_the_command_runs_ends_the_session(docker_client, gone):
    name = "it-batch-gang"
    gone.append(name)
    proc = start(
        "--json", "session", "run", name, "-n", "3", "--mem", "256m", "--", "echo ready; sleep 300"
    )
    # No stdout line with --json until the end: wait for the command to run.
    wait_for(lambda: containers(docker_client, name).get("sub2") == "running", "sub2 up", 120)
    wait_for(
        lambda: b"ready" in docker_client.containers.get(f"bai-{name}-main1").logs(stderr=False),
        "the command started",
        60,
    )
    docker_client.containers.get(f"bai-{name}-sub2").kill()
    killed = time.monotonic()
    out, err = finish(proc)
    took = time.monotonic() - killed
    job = json.loads(out)
    assert job["state"] == "failed", job
    assert job["failed"]["host"] == "sub2" and job["failed"]["signal"] == "SIGKILL", job
    assert "sub2" in job["reason"]
    assert proc.returncode == 143, err  # main1's command got SIGTERM
    assert containers(docker_client, name) == {}
    print(f"a member killed: the session was gone {took:.1f} s later")
    assert took < 60


def test_keep_on_failure_keeps_the_failed_session_stopped(docker_client, gone):
    name = "it-batch-keep"
    gone.append(name)
    run = cli(
        "session", "run", name, "-n", "2", "--mem", "256m", "--keep-on-failure", "--", "exit 5"
    )
    assert run.returncode == 5, run.stderr
    assert "kept" in run.stderr
    # Every member stopped (the gang), nothing removed: there to inspect.
    assert containers(docker_client, name) == {"main1": "exited", "sub1": "exited"}
    show = cli("--json", "session", "show", name)
    assert json.loads(show.stdout)["job"]["state"] == "failed"
    # A rerun of the same create does not start an ended batch session again.
    again = cli("session", "create", name, "-n", "2", "--mem", "256m")
    assert again.returncode != 0
    done = cli("session", "destroy", name)
    assert done.returncode == 0, done.stderr
    assert containers(docker_client, name) == {}


def test_ctrl_c_stops_the_command_and_destroys_the_session(docker_client, gone):
    name = "it-batch-int"
    gone.append(name)
    command = "trap 'echo got TERM; exit 42' TERM; echo ready; while :; do sleep 1; done"
    proc = start("session", "run", name, "-n", "2", "--mem", "256m", "--", command)
    assert proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGINT)
    _out, err = finish(proc)
    assert proc.returncode == 130, err
    assert "cancelled" in err, err
    assert containers(docker_client, name) == {}
    # The command saw the SIGTERM (its trap ran) before the session went.
    logs = cli("session", "logs", name)
    assert "got TERM" in logs.stdout, logs


def test_detach_then_the_session_ends_itself_and_reconcile_removes_it(docker_client, gone):
    name = "it-batch-detach"
    gone.append(name)
    run = cli(
        "session", "run", name, "-n", "2", "--mem", "256m", "--detach", "--", "sleep 3; echo done"
    )
    assert run.returncode == 0, run.stderr
    # Followed while it runs: printed until main1 stops with its command.
    follow = cli("session", "logs", name, "--follow")
    assert (follow.returncode, follow.stdout) == (0, "done\n"), follow
    # No controller in the loop: main1 stops with its command, sub1 follows it.
    wait_for(
        lambda: set(containers(docker_client, name).values()) == {"exited"}, "both stopped", 90
    )
    # Stopped, not removed: the capacity is held until reconcile removes them.
    assert len(containers(docker_client, name)) == 2
    reconcile = cli("session", "reconcile")
    assert reconcile.returncode == 0, reconcile.stderr
    assert name in reconcile.stdout
    assert containers(docker_client, name) == {}
    logs = cli("session", "logs", name)
    assert logs.stdout == "done\n", logs
    show = cli("--json", "session", "show", name)
    assert json.loads(show.stdout)["job"]["state"] == "succeeded"


def test_the_playbook_waits_and_fails_with_the_exit_code(docker_client, gone):
    name = "it-batch-play"
    gone.append(name)
    extra = {
        "session_name": name,
        "session_size": 2,
        "session_resources": {"cpu": 0.5, "mem": "256m"},
        "session_type": "batch",
        "session_command": "echo from the playbook; exit 9",
        "session_batch_wait": True,
    }
    run = ansible_playbook("session_create.yml", extra_vars=extra, inventory=LOCAL)
    assert run.rc != 0
    assert any("exit code 9" in failure for failure in run.failures), run
    assert run.stats["bai_session_job"]["exit_code"] == 9
    assert containers(docker_client, name) == {"main1": "exited", "sub1": "exited"}
    # Without the wait, the playbook returns once the command has started.
    extra.update(session_name=f"{name}-2", session_command="sleep 30", session_batch_wait=False)
    gone.append(f"{name}-2")
    quick = ansible_playbook("session_create.yml", extra_vars=extra, inventory=LOCAL)
    assert quick.rc == 0, quick
    assert quick.stats["bai_session"]["command_started"]
    assert containers(docker_client, f"{name}-2") == {"main1": "running", "sub1": "running"}
