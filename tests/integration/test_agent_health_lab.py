"""The agent-side health checks (playbooks/agent_check.yml, `bai-cluster agent check`) on
the lab's real agents: a healthy agent passes every check; real faults made on agent2 -
a path to one swarm manager that drops full-size packets (an nftables rule in agent2's
own network namespace) and a disk floor above what its disk has free - fail the checks
that see them, each named, and the agent passes again once the fault is gone. Nothing
is changed by a check: the agents stay in service."""

from __future__ import annotations

import time

import pytest
from conftest import ansible_playbook, bai_cli
from labtools import on_agent

pytestmark = [pytest.mark.integration, pytest.mark.lab]

FAULT = "bai_test_fault"


def test_a_healthy_agent_passes_and_each_fault_fails_its_own_check(lab, tmp_path):
    began = time.monotonic()
    done = bai_cli(tmp_path, "agent", "check", "agent1")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "agent agent1: healthy", done.stdout
    for check in ("engine", "overlay", "data", "devices", "disk"):
        assert any(line.split()[:2] == [check, "ok"] for line in lines[1:]), done.stdout
    healthy_s = time.monotonic() - began

    agent2 = lab["agent2"]
    code, managers = on_agent(
        agent2, "docker", "info", "--format", "{{range .Swarm.RemoteManagers}}{{.Addr}} {{end}}"
    )
    assert code == 0 and managers, managers
    target = managers.split()[0].rsplit(":", 1)[0]
    rules = [
        f"add table inet {FAULT}",
        f"add chain inet {FAULT} out {{ type filter hook output priority -5; }}",
        f"add rule inet {FAULT} out ip daddr {target} ip length gt 1400 drop",
    ]
    for rule in rules:
        code, out = on_agent(agent2, "nft", rule)
        assert code == 0, out
    try:
        run = ansible_playbook(
            "agent_check.yml",
            extra_vars={"agent_name": "agent2", "bai_agent_disk_floor": "100t"},
        )
        assert run.rc != 0, run.stdout
        found = run.stats["bai_agent_check"]
        assert found["answered"] and not found["healthy"], found
        assert found["failed"] == ["overlay", "disk"], found
        assert f"reaches manager {target} (" in run.stdout and "is not healthy" in run.stdout
        cli = bai_cli(tmp_path, "agent", "check", "agent2")
        assert cli.returncode == 1, cli.stdout + cli.stderr
        assert cli.stdout.splitlines()[0] == "agent agent2: not healthy (overlay)", cli.stdout
    finally:
        on_agent(agent2, "nft", f"delete table inet {FAULT}")
    again = bai_cli(tmp_path, "agent", "check", "agent2")
    assert again.returncode == 0, again.stdout + again.stderr
    listed = bai_cli(tmp_path, "agent", "list")
    assert listed.returncode == 0 and "pause" not in listed.stdout, listed.stdout
    print(f"agent check of a healthy agent: {healthy_s:.1f} s (bai-cluster, whole run)")
