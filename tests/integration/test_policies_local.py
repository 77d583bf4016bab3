"""Owners and per-owner limits (bai_session_policies, docs/placement.md) on this machine's
engine (``inventories/local``), with real ansible-playbook processes started at once.

The truth is read from Docker: which containers run, and the owner label each carries.
A limit of one session for alice holds against four concurrent creates of hers (exactly
one runs) while bob's creates, at the same moment, are unaffected; a refusal names the
limit, where it is set and what the owner holds, and leaves nothing; bad limits are
refused before anything is read; list filters by owner. Each test keeps its own ledger
file (``bai_ledger_path``).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
from pathlib import Path

import docker
import pytest
from conftest import REPO, bai_cli, finish_playbook, start_playbook
from labtools import LABEL_SESSION

pytestmark = pytest.mark.integration

LOCAL = "inventories/local"
LABEL_OWNER = "ai.backend.cluster.owner"
CAPACITY = {"cpu": 16, "mem": "16g", "gpu": 0}
POLICIES = {"default": {"sessions": 4, "cpu": 8}, "owners": {"alice": {"sessions": 1}}}


@pytest.fixture
def ledger(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ledger") / "ledger.json"


def variables(ledger: Path, name: str, owner: str | None, **extra) -> dict:
    return {
        "session_name": name,
        "session_size": 1,
        "session_resources": {"cpu": 1, "mem": "128m"},
        "bai_ledger_path": str(ledger),
        "bai_agent_resources": CAPACITY,
        "bai_session_policies": POLICIES,
        **({"session_owner": owner} if owner else {}),
        **extra,
    }


def owners_running(docker_client, prefix: str) -> dict[str, str]:
    """Session name -> owner label of the running containers of sessions named PREFIX*."""
    return {
        c.labels[LABEL_SESSION]: c.labels.get(LABEL_OWNER, "")
        for c in docker_client.containers.list(filters={"label": LABEL_SESSION})
        if c.labels[LABEL_SESSION].startswith(prefix)
    }


def left_behind(docker_client, name: str) -> list[str]:
    found = docker_client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={name}"})
    return [c.name for c in found]


def destroy_all(run_playbook, names, ledger: Path) -> None:
    done = run_playbook(
        "session_destroy.yml",
        extra_vars={"session_names": list(names), "bai_ledger_path": str(ledger)},
        inventory=LOCAL,
    )
    assert done.rc == 0, done


def test_one_session_for_alice_among_four_concurrent_creates_while_bob_is_unaffected(
    run_playbook, docker_client, ledger, tmp_path
):
    alice = [f"it-pol-a{i}" for i in range(4)]
    bob = ["it-pol-b0", "it-pol-b1"]
    procs = {
        name: start_playbook(
            "session_create.yml",
            extra_vars=variables(ledger, name, "alice" if name in alice else "bob"),
            inventory=LOCAL,
        )
        for name in alice + bob
    }
    runs = {name: finish_playbook(proc) for name, proc in procs.items()}
    try:
        running = owners_running(docker_client, "it-pol-")
        won = sorted(n for n in alice if runs[n].rc == 0)
        assert len(won) == 1, {n: (r.rc, r.failures) for n, r in runs.items()}
        assert sorted(running) == sorted(won + bob), running
        assert {running[n] for n in won} == {"alice"}
        assert running["it-pol-b0"] == running["it-pol-b1"] == "bob"
        for name in set(alice) - set(won):
            words = " ".join(runs[name].failures)
            assert "refused by the owner's limits: owner alice holds 1 session(s)" in words
            assert f"({won[0]})" in words, words
            assert "bai_session_policies.owners.alice.sessions allows" in words, words
            assert left_behind(docker_client, name) == []
        # list, filtered by owner (the CLI reads the owner label back).
        listed = bai_cli(tmp_path, "-i", LOCAL, "--json", "session", "list", "--owner", "bob")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert sorted(r["name"] for r in rows) == bob and {r["owner"] for r in rows} == {"bob"}
    finally:
        destroy_all(run_playbook, alice + bob, ledger)
    assert owners_running(docker_client, "it-pol-") == {}


def test_a_limit_refusal_leaves_nothing_bad_limits_are_refused_and_the_default_owner(
    run_playbook, docker_client, ledger
):
    # 2 x 1.5 CPUs = 3 of the default's 4: fits; a second one would make 6.
    extra = {
        "session_size": 2,
        "session_resources": {"cpu": 1.5, "mem": "128m"},
        "bai_session_policies": {"default": {"cpu": 4}},
    }
    first = run_playbook(
        "session_create.yml",
        extra_vars=variables(ledger, "it-pol-c0", None, **extra),
        inventory=LOCAL,
    )
    try:
        assert first.rc == 0, first
        # No session_owner: the user running the controller holds it.
        me = os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name
        assert owners_running(docker_client, "it-pol-c") == {"it-pol-c0": me}
        second = run_playbook(
            "session_create.yml",
            extra_vars=variables(ledger, "it-pol-c1", None, **extra),
            inventory=LOCAL,
        )
        assert second.rc != 0
        words = " ".join(second.failures)
        assert "holds 3 CPU (it-pol-c0); session it-pol-c1 would make 6 CPU" in words, words
        assert "more than the 4 CPU that bai_session_policies.default.cpu allows" in words
        assert left_behind(docker_client, "it-pol-c1") == []

        bad = variables(ledger, "it-pol-c2", None)
        bad["bai_session_policies"] = {"default": {"lifetime_s": 0}}
        refused = run_playbook("session_create.yml", extra_vars=bad, inventory=LOCAL)
        assert refused.rc != 0
        assert any("would end every session at once" in m for m in refused.failures), refused
        assert left_behind(docker_client, "it-pol-c2") == []
    finally:
        destroy_all(run_playbook, ["it-pol-c0", "it-pol-c1", "it-pol-c2"], ledger)


def test_the_cli_refuses_with_kind_policy_and_exit_3(ledger, tmp_path):
    """The policies an operator sets in the inventory; carol may hold no session at all."""
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / LOCAL, inventory)
    with (inventory / "group_vars" / "all.yml").open("a") as extra:
        extra.write(f"bai_ledger_path: {ledger}\n")
        extra.write("bai_session_policies: {owners: {carol: {sessions: 0}}}\n")
    run = bai_cli(
        tmp_path, "-i", str(inventory), "--json", "session", "create", "it-pol-d0",
        "-n", "1", "--mem", "128m", "--owner", "carol",
    )  # fmt: skip
    assert run.returncode == 3, run.stderr
    error = json.loads(run.stdout)["error"]
    assert error["kind"] == "policy", error
    assert "bai_session_policies.owners.carol.sessions allows" in error["message"], error
    assert left_behind(docker.from_env(), "it-pol-d0") == []


def test_another_owners_session_is_refused_to_show_logs_and_destroy(
    run_playbook, docker_client, ledger, tmp_path
):
    """What a login host's users rely on (--owner of show, logs and destroy, the playbooks'
    session_owner_only): bob is refused alice's session by the session ledger, and by the
    agent's labels where the ledger does not know it; nothing changes. Alice's own work."""
    name = "it-pol-o0"
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / LOCAL, inventory)
    with (inventory / "group_vars" / "all.yml").open("a") as extra:
        extra.write(f"bai_ledger_path: {ledger}\n")
    made = bai_cli(
        tmp_path, "-i", str(inventory), "session", "create", name,
        "-n", "1", "--mem", "128m", "--owner", "alice",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    for action in ("show", "logs", "destroy"):
        run = bai_cli(tmp_path, "-i", str(inventory), "session", action, name, "--owner", "bob")
        assert run.returncode != 0, (action, run.stdout)
        assert f"session {name} is held by another owner, not bob" in run.stderr, run.stderr
    assert owners_running(docker_client, name) == {name: "alice"}
    # A ledger that does not know the session: the agent's labels refuse it just the same.
    unknown = run_playbook(
        "session_destroy.yml",
        extra_vars={
            "session_name": name,
            "session_owner_only": "bob",
            "bai_ledger_path": str(tmp_path / "another-ledger.json"),
        },
        inventory=LOCAL,
    )
    assert unknown.rc != 0, unknown
    assert "held by another owner, not bob; nothing was removed" in unknown.stdout, unknown
    assert owners_running(docker_client, name) == {name: "alice"}
    shown = bai_cli(
        tmp_path, "-i", str(inventory), "--json", "session", "show", name, "--owner", "alice"
    )
    assert shown.returncode == 0, shown.stderr
    assert {c["host"] for c in json.loads(shown.stdout)["containers"]} == {"main1"}
    gone = bai_cli(tmp_path, "-i", str(inventory), "session", "destroy", name, "--owner", "alice")
    assert gone.returncode == 0, gone.stderr
    assert left_behind(docker_client, name) == []
