"""site.yml's preflight and docker_engine on this machine's engine and on inventories that
name only this controller (``ansible_connection: local``): none of it touches the lab, so
it runs in the local lane (test_site_lab converges the lab)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from labtools import one_line, recap, task_results
from test_site_lab import ROOT, playbook

pytestmark = [pytest.mark.integration]


def test_local_inventory_passes_without_touching_the_engine():
    """inventories/local: preflight passes and docker_engine only checks the engine."""
    res = playbook("-i", "inventories/local", "site.yml")
    assert res.returncode == 0, res.stdout[-3000:]
    assert recap(res.stdout)["localhost"]["changed"] == 0
    assert task_results(
        res.stdout, "bai.cluster.docker_engine : Write /etc/docker/daemon.json"
    ) == ["skipping"]
    assert task_results(
        res.stdout, "bai.cluster.docker_engine : Check that the engine answers (not managed here)"
    ) == ["ok"]


def _netns_with_public_address() -> str | None:
    """A network namespace whose only address besides loopback is public (1.2.3.4), or None."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        return None
    ns = f"bai-pf-{os.getpid()}"
    steps = [
        ["ip", "netns", "add", ns],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
        # A veth pair with both ends inside the namespace (no dummy driver on every kernel).
        ["ip", "-n", ns, "link", "add", "pub0", "type", "veth", "peer", "name", "pub1"],
        ["ip", "-n", ns, "addr", "add", "1.2.3.4/32", "dev", "pub0"],
        ["ip", "-n", ns, "link", "set", "pub0", "up"],
    ]
    for step in steps:
        if subprocess.run(step, capture_output=True, check=False).returncode != 0:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
            return None
    return ns


def test_preflight_rejects_an_agent_with_a_public_address(tmp_path):
    """An all-in-one agent (the controller itself) seen from a network namespace that holds
    a public address: refused unless bai_allow_public_agents is true."""
    ns = _netns_with_public_address()
    if ns is None:
        pytest.skip(
            "cannot make a network namespace with a public address here (needs root and ip)"
        )
    try:
        host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        inventory = {
            "all": {
                "vars": {
                    "bai_zone_cidrs": {},
                    "bai_admin_cidrs": [],
                    "bai_allow_public_agents": False,
                },
                "children": {
                    "manager": {"hosts": {"pubagent": host}},
                    "agents": {"hosts": {"pubagent": {"bai_resource_group": "default"}}},
                },
            }
        }
        (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
        in_ns = ("ip", "netns", "exec", ns)
        args = ("-i", str(tmp_path / "hosts.yml"), str(ROOT / "site.yml"), "--tags", "preflight")
        res = playbook(*args, prefix=in_ns)
        assert res.returncode != 0, res.stdout[-3000:]
        text = one_line(res.stdout)
        assert "Agent pubagent has public IPv4 address(es) 1.2.3.4." in text
        assert f'set "bai_allow_public_agents: true" in {tmp_path}/group_vars/all.yml' in text
        allowed = playbook(*args, "-e", "bai_allow_public_agents=true", prefix=in_ns)
        assert allowed.returncode == 0, allowed.stdout[-3000:]
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def test_preflight_names_every_agent_without_a_resource_group(tmp_path):
    """A resource group really absent from the inventory (not just null via -e)."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "vars": {**local, "bai_zone_cidrs": {}, "bai_allow_public_agents": True},
            "children": {
                "manager": {"hosts": {"a1": None}},
                "agents": {"hosts": {"a1": None, "a2": {"bai_resource_group": "gpu"}, "a3": None}},
            },
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    res = playbook("-i", str(tmp_path / "hosts.yml"), "site.yml", "--tags", "preflight")
    assert res.returncode != 0, res.stdout[-3000:]
    text = one_line(res.stdout)
    for agent in ["a1", "a3"]:
        assert f"Agent {agent} has no bai_resource_group" in text
        assert f"or for this one in {tmp_path}/host_vars/{agent}.yml" in text
    assert f"{tmp_path}/group_vars/agents.yml" in text
    assert "Agent a2 has" not in text
