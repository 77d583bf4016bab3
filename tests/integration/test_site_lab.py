"""site.yml on the embedded lab: preflight and docker_engine.

Needs a Docker engine and the lab up (`make lab-up`; `make integration` does it). The
first converge of a fresh lab writes daemon.json and restarts the manager's and agents'
inner engines once; later converges must change nothing."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import pytest
from conftest import ansible
from labtools import changed_hosts, on_agent, one_line, recap

pytestmark = [pytest.mark.integration, pytest.mark.lab]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_HOSTS = ["webserver", "manager", "manager2", "manager3", "appproxy", "agent1", "agent2"]
ENGINE_HOSTS = ["manager", "manager2", "manager3", "agent1", "agent2"]
POOL = {"base": "10.200.0.0/14", "size": 24}


def playbook(*args: str, prefix: tuple[str, ...] = ()):
    return ansible("ansible-playbook", *args, prefix=prefix, timeout=600)


@pytest.fixture(scope="module")
def converged(site_converged):
    """site.yml twice on the lab (shared by the lab's converge tests): (first, second)."""
    return site_converged


# --- converge -------------------------------------------------------------------------
def test_first_converge_succeeds_on_every_cluster_host(converged):
    first, _second = converged
    assert first.rc == 0, first
    rows = first.result["stats"]
    assert first.hosts == sorted(CLUSTER_HOSTS)
    assert all(r["failures"] == 0 and r["unreachable"] == 0 for r in rows.values()), rows
    # The shared converge goes over SSH (inventories/lab-ssh), which lists no probe: in the
    # default inventory, which does, site.yml's plays must still leave lab_probes alone.
    listed = playbook("site.yml", "--list-hosts")
    assert listed.returncode == 0, listed.stderr
    hosts = set(re.findall(r"^\s{6}(\S+)$", listed.stdout, re.M))
    assert hosts == set(CLUSTER_HOSTS), listed.stdout


def test_second_converge_changes_nothing(converged):
    """The one idempotence test of the shared converge (test_swarm_lab's and
    test_firewall_lab's modules check what it made)."""
    _first, second = converged
    assert second.rc == 0, second
    assert second.hosts == sorted(CLUSTER_HOSTS)
    assert all(
        r["failures"] == 0 and r["unreachable"] == 0 for r in second.result["stats"].values()
    )
    assert changed_hosts(second) == {}, second


@pytest.mark.parametrize("node", ENGINE_HOSTS)
def test_daemon_json_is_the_roles_and_the_engine_runs_with_it(converged, lab, node):
    rc, out = on_agent(lab[node], "cat", "/etc/docker/daemon.json")
    assert rc == 0, out
    config = json.loads(out)
    assert config["default-address-pools"] == [POOL]
    assert config["icc"] is False
    assert config["log-driver"] == "json-file"
    assert config["log-opts"] == {"max-size": "10m", "max-file": "3"}
    assert "live-restore" not in config  # Swarm refuses it
    assert "mtu" not in config and "runtimes" not in config  # null / empty: left out
    rc, out = on_agent(lab[node], "docker", "info", "--format", "{{json .}}")
    assert rc == 0, out
    info = json.loads(out)
    assert info["ServerVersion"] and info["LoggingDriver"] == "json-file"
    # The default bridge is addressed from the pool and has icc off.
    rc, out = on_agent(
        lab[node], "docker", "network", "inspect", "bridge", "--format", "{{json .}}"
    )
    bridge = json.loads(out)
    subnet = ipaddress.ip_network(bridge["IPAM"]["Config"][0]["Subnet"])
    assert subnet.subnet_of(ipaddress.ip_network(POOL["base"])), subnet
    assert bridge["Options"]["com.docker.network.bridge.enable_icc"] == "false"


def test_python_docker_sdk_is_on_the_agents(converged, lab):
    for node in ["agent1", "agent2"]:
        rc, out = on_agent(
            lab[node], "sh", "-c", "python3 -c 'import docker; print(docker.__version__)'"
        )
        assert rc == 0, (node, out)


# --- preflight: what it rejects, and the message that says what to change -------------
LAB_VARS = "inventories/lab/group_vars"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            {
                "bai_zone_cidrs": {
                    "public": "10.210.0.0/16",
                    "management": "10.210.2.0/24",
                    "compute": "10.210.3.0/24",
                }
            },
            [
                "bai_zone_cidrs (set in",
                f"{LAB_VARS}/all.yml) has overlapping zones",
                "public (10.210.0.0/16) overlaps management (10.210.2.0/24); "
                "public (10.210.0.0/16) overlaps compute (10.210.3.0/24)",
            ],
            id="overlapping-zones",
        ),
        pytest.param(
            {"bai_zone_cidrs": {"compute": "10.210.3.7/24"}},
            ["compute: '10.210.3.7/24' has host bits set; the network is 10.210.3.0/24"],
            id="invalid-zone-cidr",
        ),
        pytest.param(
            {"bai_resource_group": None},
            [
                "Agent agent1 has bai_resource_group null",
                f"{LAB_VARS}/agents.yml",
                "inventories/lab/host_vars/agent1.yml",
            ],
            id="missing-resource-group",
        ),
        pytest.param(
            {"preflight_required_groups": ["manager", "agents", "storage"]},
            ["group(s) storage have no hosts", "inventories/lab/hosts.yml"],
            id="empty-required-group",
        ),
        pytest.param(
            {"bai_admin_cidrs": ["10.210.2.0/33"]},
            ["bai_admin_cidrs (set in", "[0]: '10.210.2.0/33' not a valid CIDR"],
            id="invalid-admin-cidr",
        ),
    ],
)
def test_preflight_rejects_a_bad_inventory_with_a_message_that_says_what_to_change(extra, expected):
    res = playbook("site.yml", "--tags", "preflight", "-e", json.dumps(extra))
    assert res.returncode != 0, res.stdout[-3000:]
    text = one_line(res.stdout + res.stderr)
    for fragment in expected:
        assert fragment in text, (fragment, res.stdout[-3000:])


def test_docker_engine_refuses_pools_that_overlap_a_zone_before_touching_a_host(converged, lab):
    before = {
        node: on_agent(lab[node], "cat", "/etc/docker/daemon.json")[1] for node in ENGINE_HOSTS
    }
    extra = {"docker_engine_address_pools": [{"base": "10.210.0.0/16", "size": 24}]}
    res = playbook("site.yml", "--tags", "docker_engine", "-e", json.dumps(extra))
    assert res.returncode != 0, res.stdout[-3000:]
    text = one_line(res.stdout)
    assert "docker_engine_address_pools[0] (10.210.0.0/16) overlaps compute (10.210.3.0/24)" in text
    assert "group_vars/all.yml" in text
    assert all(r["changed"] == 0 for r in recap(res.stdout).values())
    after = {
        node: on_agent(lab[node], "cat", "/etc/docker/daemon.json")[1] for node in ENGINE_HOSTS
    }
    assert after == before
