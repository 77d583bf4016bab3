"""site.yml on the embedded lab: preflight and docker_engine.

Needs a Docker engine and the lab up (`make lab-up`; `make integration` does it). The
first converge of a fresh lab writes daemon.json and restarts the manager's and agents'
inner engines once; later converges must change nothing."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import pytest
import yaml
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
    _first, second = converged
    assert second.rc == 0, second
    assert second.hosts == sorted(CLUSTER_HOSTS)
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
