"""Preemption (docs/placement.md, "Preemption") on this machine's engine: one virtual agent
of 2 CPUs held by a preemptible batch session (``session run --preemptible --restarts 1
--signal USR1@3``) whose command saves a "checkpoint" and exits 0 on USR1; a session of an
owner with a higher policy priority is queued. ``bai-cluster session schedule`` (which runs
playbooks/session_schedule.yml) warns the batch session, stops it as ``preempted`` - its
clean exit after the warning counts as preempted all the same - starts the queued one, and
the batch session's gang waits in the queue to start again, behind it, with its owner
charged nothing for the attempt. What runs is read from Docker.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from conftest import bai_cli
from conftest import virtual_agents as make_inventory
from labtools import LABEL_SESSION, wait_for

pytestmark = pytest.mark.integration

COMMAND = (
    "trap 'echo saved a checkpoint; exit 0' USR1; echo started; while true; do sleep 0.2; done"
)
WHOLE = ("-n", "2", "--cpu", "1", "--mem", "128m")  # the agent's whole offer


def cli(tmp: Path, inventory: Path, *argv: str):
    run = bai_cli(tmp, "-i", str(inventory), "--json", *argv)
    assert run.returncode == 0, (argv, run.stdout, run.stderr)
    return json.loads(run.stdout)


def running(docker_client, prefix: str) -> set[str]:
    return {
        c.labels[LABEL_SESSION]
        for c in docker_client.containers.list(filters={"label": LABEL_SESSION})
        if c.labels[LABEL_SESSION].startswith(prefix)
    }


def test_a_higher_priority_session_preempts_a_preemptible_batch_session(docker_client, tmp_path):
    inventory = make_inventory(tmp_path, ("pm1",), cpu=2)
    book = yaml.safe_load(inventory.read_text())
    book["all"]["vars"]["bai_session_policies"] = {"owners": {"ops": {"priority": 50}}}
    inventory.write_text(yaml.safe_dump(book))
    low, high = "it-pm-low", "it-pm-high"
    try:
        run = bai_cli(
            tmp_path, "-i", str(inventory), "session", "run", low, *WHOLE, "--owner", "batch",
            "--restarts", "1", "--preemptible", "--signal", "USR1@3", "--detach", "--", COMMAND,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        queued = cli(tmp_path, inventory, "session", "create", high, *WHOLE, "--owner", "ops",
                     "--queue")  # fmt: skip
        assert queued["action"] == "queued", queued

        began = time.monotonic()
        done = cli(tmp_path, inventory, "session", "schedule")
        took = time.monotonic() - began
        assert [(p["session"], p["victims"]) for p in done["preempted"]] == [(high, [low])], done
        assert "priority 50 over 0" in done["preempted"][0]["reason"], done
        assert done["started"] == [high], done
        assert running(docker_client, "it-pm-") == {high}  # Docker: high runs, low is gone

        rows = {r["name"]: r for r in cli(tmp_path, inventory, "session", "list")}
        assert rows[low]["state"] == "PENDING", rows
        ledger = json.loads((tmp_path / "ledger.json").read_text())
        (attempt,) = ledger["queue"][low]["attempts"]
        # It exited 0 on its warning, yet it was preempted: its gang comes back.
        assert (attempt["state"], attempt["exit_code"]) == ("preempted", 0), attempt
        assert attempt["restarted_because"] == f"preempted for {high}", attempt
        assert "batch" not in (ledger.get("usage") or {}), ledger.get("usage")
        print(f"preemption with a 3 s warning, through the started session: {took:.1f} s")

        # What it made room for goes; the gang starts again (attempt 1) in that room.
        cli(tmp_path, inventory, "session", "destroy", high)
        wait_for(lambda: running(docker_client, "it-pm-") == {low}, "the gang to start again", 60)
    finally:
        for name in (high, low):
            bai_cli(tmp_path, "-i", str(inventory), "--quiet", "session", "destroy", name)
    assert running(docker_client, "it-pm-") == set()
