"""Gang restarts of batch sessions (docs/sessions.md, "Restarts") on this machine's engine,
run as a user runs them: ``bai-cluster session run --restarts N [--restart-on CODES]``.

A two-container job fails with an exit code it names on its first attempt and succeeds
on the second: ``session run`` follows the new attempt and exits 0, both attempts ran
under the same session id with BACKENDAI_SESSION_RESTART_COUNT 0 then 1 in every member
(``ssh sub1`` reads it too), each attempt's output is kept apart (``session logs
--attempt K``), and ``session show`` lists the first attempt's end. The engine's own
timestamps show the first gang was gone before the second started. A code it did not name
is not restarted, and a job that keeps failing stops at its maximum.

The agent here answers, so the restart follows the job's own end; an agent lost under a
running job is the lab's test (test_restarts_lab.py).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from conftest import REPO, bai_cli

pytestmark = pytest.mark.integration

CLI = REPO / ".venv" / "bin" / "bai-cluster"
LOCAL = "inventories/local"
LABEL = "ai.backend.cluster.session"
SMALL = ("--cpu", "0.25", "--mem", "256m")


def cli(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return bai_cli(None, "-i", LOCAL, *argv, timeout=timeout)


@pytest.fixture
def gone(docker_client):
    names: list[str] = []
    yield names
    for name in names:
        if docker_client.containers.list(all=True, filters={"label": f"{LABEL}={name}"}):
            cli("session", "destroy", name)


def container_times(docker_client, name: str) -> list[tuple[str, str, str]]:
    """(host, id, Docker's StartedAt) of the session's containers on this engine."""
    found = docker_client.containers.list(all=True, filters={"label": f"{LABEL}={name}"})
    return [
        (c.labels["ai.backend.cluster.host"], c.id, c.attrs["State"]["StartedAt"]) for c in found
    ]


def test_a_named_exit_restarts_the_gang_with_its_id_and_the_run_follows_it(docker_client, gone):
    name = "it-restart"
    gone.append(name)
    command = (
        'echo "attempt $BACKENDAI_SESSION_RESTART_COUNT id $BACKENDAI_SESSION_ID"; '
        "ssh sub1 printenv BACKENDAI_SESSION_RESTART_COUNT; "
        'test "$BACKENDAI_SESSION_RESTART_COUNT" = 1 || exit 3; echo done'
    )
    # Only what the test reads: the pipe is read after the run, and a gate's exec event
    # carries its whole script (CI once saw the stream stop when 64 KiB of them filled it).
    events = subprocess.Popen(
        ["docker", "events", "--format", "{{json .}}", "--filter", f"label={LABEL}={name}",
         "--filter", "type=container", "--filter", "event=create", "--filter", "event=destroy"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        began = time.monotonic()
        run = cli(
            "session", "run", name, "-n", "2", *SMALL,
            "--restarts", "2", "--restart-on", "3", "--", command,
        )  # fmt: skip
        took = time.monotonic() - began
    finally:
        events.terminate()
        seen = [json.loads(line) for line in events.communicate(timeout=10)[0].splitlines()]
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [lines[0].split()[:2], lines[1]] == [["attempt", "0"], "0"], lines
    assert [lines[2].split()[:2], lines[3], lines[4]] == [["attempt", "1"], "1", "done"], lines
    first_id, second_id = lines[0].split()[3], lines[2].split()[3]
    assert first_id == second_id, lines
    assert "starts again (attempt 1)" in run.stderr and "exited 3" in run.stderr, run.stderr
    assert "succeeded" in run.stderr.splitlines()[-1], run.stderr
    print(f"local: a 2-container job restarted once, run to its end in {took:.1f} s")

    # From the engine's events: every container of the first gang was destroyed before
    # any container of the second was created.
    made = sorted((e["timeNano"], e["id"]) for e in seen if e.get("Action") == "create")
    removed = {e["id"]: e["timeNano"] for e in seen if e.get("Action") == "destroy"}
    actions = [(e.get("Action"), e["id"][:12]) for e in seen]
    assert len(made) == 4, actions
    first, second = made[:2], made[2:]
    assert all(cid in removed for _t, cid in first), actions
    gap = min(t for t, _cid in second) - max(removed[cid] for _t, cid in first)
    assert gap > 0, actions
    print(f"local: the second gang was created {gap / 1e9:.2f} s after the first was removed")

    # Each attempt's output, kept apart; show lists the first attempt's end.
    logs = {k: cli("session", "logs", name, "--attempt", str(k)) for k in (0, 1)}
    assert logs[0].stdout.splitlines() == lines[:2], logs[0].stderr
    assert logs[1].stdout.splitlines() == lines[2:], logs[1].stderr
    assert cli("session", "logs", name).stdout == logs[1].stdout
    missing = cli("session", "logs", name, "--attempt", "5")
    assert missing.returncode != 0 and "no attempt 5 (it ran 2)" in missing.stderr
    show = json.loads(cli("--json", "session", "show", name).stdout)
    assert (show["job"]["state"], show["attempt"]) == ("succeeded", 1)
    (earlier,) = show["attempts"]
    assert (earlier["attempt"], earlier["state"], earlier["exit_code"]) == (0, "failed", 3)
    assert "restart_on" in earlier["restarted_because"]


def test_an_exit_it_did_not_name_ends_it_and_restarts_stop_at_the_maximum(gone):
    gone += ["it-restart-no", "it-restart-max"]
    other = cli(
        "session", "run", "it-restart-no", "-n", "1", *SMALL,
        "--restarts", "1", "--restart-on", "3", "--", "exit 4",
    )  # fmt: skip
    assert other.returncode == 4, other.stderr
    assert "starts again" not in other.stderr

    looping = cli(
        "session", "run", "it-restart-max", "-n", "1", *SMALL,
        "--restarts", "1", "--restart-on", "3", "--",
        'echo "try $BACKENDAI_SESSION_RESTART_COUNT"; exit 3',
    )  # fmt: skip
    assert looping.returncode == 3, looping.stderr
    assert looping.stdout.splitlines() == ["try 0", "try 1"], looping.stdout
    assert looping.stderr.count("starts again") == 1, looping.stderr
    show = json.loads(cli("--json", "session", "show", "it-restart-max").stdout)
    assert (show["job"]["exit_code"], show["attempt"], len(show["attempts"])) == (3, 1, 1)


def test_bad_restart_options_are_refused_before_anything_runs(docker_client):
    for argv, words in [
        (["--restarts", "101"], "--restarts"),
        (["--restarts", "1", "--restart-on", "3;reboot"], "--restart-on"),
        (["--restart-on", "3"], "restarts is 0"),
        (["--restarts", "1", "--keep"], "cannot keep"),
    ]:
        run = cli("session", "run", "it-restart-bad", "-n", "1", *argv, "--", "true")
        assert run.returncode == 2 and words in run.stderr, (argv, run.stderr)
    assert not docker_client.containers.list(all=True, filters={"label": f"{LABEL}=it-restart-bad"})


def test_a_forced_drain_restarts_the_gang_once_an_agent_has_room(docker_client):
    """A drain of the only agent here: the preempted gang waits at the head of the queue
    (no agent has room) and starts, as its second attempt, once the agent is active."""
    name = "it-restart-drain"
    command = (
        'echo "attempt $BACKENDAI_SESSION_RESTART_COUNT"; '
        'test "$BACKENDAI_SESSION_RESTART_COUNT" = 1 && exit 0; '
        "trap 'exit 143' TERM; while true; do sleep 0.2; done"
    )
    try:
        run = cli(
            "session", "run", name, "-n", "1", *SMALL, "--restarts", "1", "--detach", "--",
            command,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        try:
            drained = cli("--json", "agent", "drain", "localhost", "--force", "--timeout", "1")
            assert drained.returncode == 0, drained.stderr
        finally:
            back = cli("agent", "activate", "localhost")
            assert back.returncode == 0, back.stderr
        again = json.loads(drained.stdout)["restarted"][name]
        assert again["attempt"] == 1 and "drain" in again["reason"], again
        waiting = json.loads(cli("--json", "session", "show", name).stdout)
        assert (waiting["state"], waiting["attempt"]) == ("PENDING", 1), waiting
        assert waiting["attempts"][0]["state"] == "preempted", waiting
        # At the head of its queue; the drain's scheduler pass said why it waits.
        assert waiting["pending"]["position"] == 1, waiting
        assert "localhost drained" in waiting["pending"]["reason"], waiting

        assert cli("session", "schedule").returncode == 0
        deadline = time.monotonic() + 60
        while cli("session", "logs", name).stdout != "attempt 1\n":
            assert time.monotonic() < deadline, cli("session", "show", name).stdout
            time.sleep(1)
        assert cli("session", "reconcile").returncode == 0  # removes the ended session
        done = json.loads(cli("--json", "session", "show", name).stdout)
        assert (done["job"]["state"], done["attempt"]) == ("succeeded", 1), done
        first = cli("session", "logs", name, "--attempt", "0").stdout
        assert first.splitlines()[0] == "attempt 0", first  # then bash's "Terminated"
    finally:
        cli("session", "destroy", name)
