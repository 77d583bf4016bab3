"""Session lifetimes (session_lifetime_s, docs/sessions.md) on this machine's engine
(``inventories/local``), end to end: the lifetime is counted from when the session was
placed, list gives the time left, a reconcile before it is up ends nothing, and the one
after it stops the session (SIGTERM, which a ``trap`` in the command sees, then SIGKILL
after the grace) and removes it; a batch session ends with the state timeout and its
output, the trap's line included, is kept. An owner's longest lifetime
(bai_session_policies) applies to a session that asks for none, and a longer one is
refused. What runs is read from Docker.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import bai_cli, labels_of
from labtools import LABEL_SESSION, wait_for

pytestmark = pytest.mark.integration

LOCAL = "inventories/local"
LABEL_LIFETIME = "ai.backend.cluster.lifetime-s"
# Prints, then waits for ever; SIGTERM (to the command's process group) ends it through
# the trap, which says so.
LIFETIME = 30
COMMAND = "trap 'echo got SIGTERM; exit 143' TERM; echo started; while true; do sleep 1; done"


def cli(tmp: Path, *argv: str) -> dict | list | str:
    run = bai_cli(tmp, "-i", LOCAL, "--json", *argv)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout) if run.stdout.strip().startswith(("{", "[")) else run.stdout


def test_a_batch_sessions_lifetime_ends_it_with_sigterm_then_reconcile_removes_it(
    docker_client, tmp_path, gone
):
    name = "it-life-batch"
    gone.append(name)
    run = bai_cli(
        tmp_path, "-i", LOCAL, "session", "run", name, "-n", "2", "--mem", "128m",
        "--lifetime", str(LIFETIME), "--grace", "5", "--detach", "--", COMMAND,
    )  # fmt: skip
    started = time.monotonic()
    assert run.returncode == 0, run.stderr
    assert {labels[LABEL_LIFETIME] for labels in labels_of(docker_client, name)} == {str(LIFETIME)}

    # Not yet: a reconcile before the lifetime is up ends nothing.
    early = cli(tmp_path, "session", "reconcile")
    assert time.monotonic() - started < LIFETIME, "the first reconcile came too late to tell"
    assert name not in early["lifetime_up"], early
    assert {labels[LABEL_SESSION] for labels in labels_of(docker_client, name)} == {name}
    (row,) = [r for r in cli(tmp_path, "session", "list") if r["name"] == name]
    assert row["lifetime_s"] == LIFETIME and 0 <= row["time_left"] < LIFETIME, row

    time.sleep(max(0.0, LIFETIME - (time.monotonic() - started)) + 1)
    done = cli(tmp_path, "session", "reconcile")
    took = time.monotonic() - started
    assert done["lifetime_up"] == [name], done
    assert labels_of(docker_client, name) == []
    logs = bai_cli(tmp_path, "-i", LOCAL, "session", "logs", name)
    # (bash also says "Terminated" of the sleep the same SIGTERM ended)
    lines = logs.stdout.splitlines()
    assert lines[0] == "started" and lines[-1] == "got SIGTERM", logs
    job = cli(tmp_path, "session", "show", name)["job"]
    assert job["state"] == "timeout" and "lifetime" in job["reason"], job
    print(f"a {LIFETIME} s lifetime: the session gone {took:.1f} s after session run returned")


def test_the_owners_longest_lifetime_applies_and_a_longer_one_is_refused(
    run_playbook, docker_client, tmp_path_factory, gone
):
    ledger = tmp_path_factory.mktemp("ledger") / "ledger.json"
    name = "it-life-owner"
    gone.append(name)
    base = {
        "session_size": 1,
        "session_resources": {"cpu": 0.5, "mem": "128m"},
        "session_owner": "dana",
        "bai_ledger_path": str(ledger),
        "bai_session_policies": {"owners": {"dana": {"lifetime_s": 8}}},
    }
    longer = run_playbook(
        "session_create.yml",
        extra_vars={**base, "session_name": f"{name}-2", "session_lifetime_s": 60},
        inventory=LOCAL,
    )
    assert longer.rc != 0
    words = "session_lifetime_s 60 is longer than the 8 s that bai_session_policies.owners.dana"
    assert any(words in m for m in longer.failures), longer.failures
    assert labels_of(docker_client, f"{name}-2") == []

    made = run_playbook(
        "session_create.yml", extra_vars={**base, "session_name": name}, inventory=LOCAL
    )
    assert made.rc == 0, made
    assert [labels[LABEL_LIFETIME] for labels in labels_of(docker_client, name)] == ["8"]

    # An interactive session: its container is stopped (SIGTERM, SIGKILL after the
    # grace), then removed, once its lifetime is up.
    def reconcile_ends_it() -> bool:
        """One reconcile: it must succeed every time; True once it ended the session."""
        run = run_playbook(
            "session_reconcile.yml",
            extra_vars={"bai_ledger_path": str(ledger), "session_stop_grace_s": 2},
            inventory=LOCAL,
        )
        assert run.rc == 0, run
        return run.stats.get("bai_reconcile", {}).get("lifetime_up") == [name]

    wait_for(reconcile_ends_it, "the reconcile that ends it", seconds=60)
    assert labels_of(docker_client, name) == []
