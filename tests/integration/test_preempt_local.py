"""A forced drain of an agent (docs/operations.md, "Draining an agent") on this machine's
engine: a batch session that asked for a warning before its end (``--signal USR1@3``) gets
USR1 once the drain's wait is over, then, the lead later, SIGTERM; it ends ``preempted``,
told apart from the command failing, its output (both traps' lines) kept. What runs is
read from Docker; the agent is put back in service whatever happens.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import bai_cli, labels_of
from labtools import wait_for

pytestmark = pytest.mark.integration

LOCAL = "inventories/local"
AGENT = "localhost"
COMMAND = (
    "trap 'echo warned by USR1' USR1; trap 'echo got SIGTERM; exit 143' TERM; "
    "echo started; while true; do sleep 0.2; done"
)


def output(tmp: Path, name: str) -> list[str]:
    return bai_cli(tmp, "-i", LOCAL, "session", "logs", name).stdout.splitlines()


def test_a_forced_drain_warns_the_session_then_stops_it_as_preempted(docker_client, tmp_path, gone):
    name = "it-preempt"
    gone.append(name)
    run = bai_cli(
        tmp_path, "-i", LOCAL, "session", "run", name, "-n", "2", "--mem", "128m",
        "--signal", "USR1@3", "--grace", "5", "--detach", "--", COMMAND,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    wait_for(lambda: output(tmp_path, name)[:1] == ["started"], "the command to start", 30)
    try:
        began = time.monotonic()
        drained = bai_cli(
            tmp_path, "-i", LOCAL, "--json", "agent", "drain", AGENT, "--force", "--timeout", "1"
        )
        took = time.monotonic() - began
        assert drained.returncode == 0, drained.stderr
    finally:
        back = bai_cli(tmp_path, "-i", LOCAL, "agent", "activate", AGENT)
        assert back.returncode == 0, back.stderr
    assert labels_of(docker_client, name) == []
    lines = output(tmp_path, name)
    # USR1 first, then (the lead later) the stop's SIGTERM.
    assert lines[0] == "started" and lines[-1] == "got SIGTERM", lines
    assert "warned by USR1" in lines and lines.index("warned by USR1") < len(lines) - 1, lines
    shown = bai_cli(tmp_path, "-i", LOCAL, "--json", "session", "show", name)
    job = json.loads(shown.stdout)["job"]
    assert job["state"] == "preempted", job
    assert job["reason"] == f"agent {AGENT} was drained (agent drain --force)", job
    # The drain waited its 1 s, then the warning's 3 s (read every 5 s), then stopped it.
    assert took >= 4, took
    print(f"forced drain with a 3 s warning: {took:.1f} s")
