"""site.yml on the embedded lab: preflight and docker_engine.

Needs a Docker engine and the lab up (`make lab-up`; `make integration` does it). The
first converge of a fresh lab writes daemon.json and restarts the manager's and agents'
inner engines once; later converges must change nothing."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import docker
import pytest
from labtools import changed_hosts

pytestmark = [pytest.mark.integration, pytest.mark.lab]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_HOSTS = ["webserver", "manager", "manager2", "manager3", "appproxy", "agent1", "agent2"]
ENGINE_HOSTS = ["manager", "manager2", "manager3", "agent1", "agent2"]
POOL = {"base": "10.200.0.0/14", "size": 24}


def playbook(
    *args: str, cwd: Path = ROOT, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    cmd = [*prefix, str(Path(sys.executable).parent / "ansible-playbook"), *args]
    return subprocess.run(
        cmd, cwd=cwd, env=env, text=True, capture_output=True, timeout=600, check=False
    )


def recap(output: str) -> dict[str, dict[str, int]]:
    """Parse PLAY RECAP lines into {host: {ok: n, changed: n, failed: n, ...}}."""
    rows = {}
    for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", output, re.M):
        rows[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return rows


def task_results(output: str, task: str) -> list[str]:
    """The status words (ok, changed, skipping, failed...) printed under TASK [task]."""
    block = (
        output.split(f"TASK [{task}]", 1)[1].split("TASK [", 1)[0]
        if f"TASK [{task}]" in output
        else ""
    )
    return re.findall(r"^(\w+): \[", block, re.M)


def one_line(output: str) -> str:
    """Ansible wraps long messages; compare against the text with whitespace collapsed."""
    return " ".join(output.replace("''", "'").split())


def node_exec(client: docker.DockerClient, node: str, cmd: str) -> tuple[int, str]:
    res = client.containers.get(f"bai-lab-{node}").exec_run(["sh", "-c", cmd])
    return res.exit_code, res.output.decode()


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return docker.from_env()


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
def test_daemon_json_is_the_roles_and_the_engine_runs_with_it(converged, client, node):
    rc, out = node_exec(client, node, "cat /etc/docker/daemon.json")
    assert rc == 0, out
    config = json.loads(out)
    assert config["default-address-pools"] == [POOL]
    assert config["icc"] is False
    assert config["log-driver"] == "json-file"
    assert config["log-opts"] == {"max-size": "10m", "max-file": "3"}
    assert "live-restore" not in config  # Swarm refuses it
    assert "mtu" not in config and "runtimes" not in config  # null / empty: left out
    rc, out = node_exec(client, node, "docker info --format '{{json .}}'")
    assert rc == 0, out
    info = json.loads(out)
    assert info["ServerVersion"] and info["LoggingDriver"] == "json-file"
    # The default bridge is addressed from the pool and has icc off.
    rc, out = node_exec(client, node, "docker network inspect bridge --format '{{json .}}'")
    bridge = json.loads(out)
    subnet = ipaddress.ip_network(bridge["IPAM"]["Config"][0]["Subnet"])
    assert subnet.subnet_of(ipaddress.ip_network(POOL["base"])), subnet
    assert bridge["Options"]["com.docker.network.bridge.enable_icc"] == "false"


def test_python_docker_sdk_is_on_the_agents(converged, client):
    for node in ["agent1", "agent2"]:
        rc, out = node_exec(client, node, "python3 -c 'import docker; print(docker.__version__)'")
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


def test_docker_engine_refuses_pools_that_overlap_a_zone_before_touching_a_host(converged, client):
    before = {
        node: node_exec(client, node, "cat /etc/docker/daemon.json")[1] for node in ENGINE_HOSTS
    }
    extra = {"docker_engine_address_pools": [{"base": "10.210.0.0/16", "size": 24}]}
    res = playbook("site.yml", "--tags", "docker_engine", "-e", json.dumps(extra))
    assert res.returncode != 0, res.stdout[-3000:]
    text = one_line(res.stdout)
    assert "docker_engine_address_pools[0] (10.210.0.0/16) overlaps compute (10.210.3.0/24)" in text
    assert "group_vars/all.yml" in text
    assert all(r["changed"] == 0 for r in recap(res.stdout).values())
    after = {
        node: node_exec(client, node, "cat /etc/docker/daemon.json")[1] for node in ENGINE_HOSTS
    }
    assert after == before
