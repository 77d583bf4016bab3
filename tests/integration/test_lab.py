"""The embedded lab (docs/lab.md), checked from the outside and from inside nodes.

Needs a Docker engine and the lab up (`make lab-up`; `make integration` does it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]

ROOT = Path(__file__).resolve().parents[2]
NODES = [
    "webserver",
    "manager",
    "manager2",
    "manager3",
    "appproxy",
    "agent1",
    "agent2",
    "user",
    "intruder",
]
ZONES = {
    "webserver": {"public", "mgmt"},
    "manager": {"mgmt", "compute"},
    "manager2": {"mgmt", "compute"},
    "manager3": {"mgmt", "compute"},
    "appproxy": {"public", "compute"},
    "agent1": {"compute"},
    "agent2": {"compute"},
    "user": {"public"},
    "intruder": {"compute"},
}
LABEL = "ai.backend.lab"


def playbook(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), *args],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        # A hang fails the test (and says where) instead of eating CI's time.
        timeout=1200,
        check=False,
    )


def node_exec(client: docker.DockerClient, node: str, cmd: str) -> tuple[int, str]:
    res = client.containers.get(f"bai-lab-{node}").exec_run(["sh", "-c", cmd])
    return res.exit_code, res.output.decode()


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return docker.from_env()


def test_all_nodes_run_with_labels(client):
    found = {
        c.labels["ai.backend.lab.node"]: c
        for c in client.containers.list(filters={"label": f"{LABEL}=bai-lab"})
    }
    assert sorted(found) == sorted(NODES)
    assert all(c.status == "running" for c in found.values())


def test_nodes_sit_in_their_zones(client):
    for node, zones in ZONES.items():
        nets = client.containers.get(f"bai-lab-{node}").attrs["NetworkSettings"]["Networks"]
        assert {n.removeprefix("bai-lab-") for n in nets} == zones, node


def test_agents_and_managers_run_their_own_engine(client):
    for node in ["manager", "manager2", "manager3", "agent1", "agent2"]:
        rc, out = node_exec(client, node, "docker version --format '{{.Server.Version}}'")
        assert rc == 0 and out.strip(), (node, out)
    rc, out = node_exec(client, "agent1", "docker image inspect bai/session:latest >/dev/null")
    assert rc == 0, "the session image was not loaded into agent1"


def test_agents_share_one_data_folder(client):
    token = os.urandom(8).hex()
    rc, _out = node_exec(client, "agent1", f"echo {token} > /srv/bai-data/.lab-test")
    assert rc == 0
    rc, out = node_exec(client, "agent2", "cat /srv/bai-data/.lab-test")
    assert rc == 0 and out.strip() == token
    node_exec(client, "agent1", "rm -f /srv/bai-data/.lab-test")


def test_stand_in_listeners_answer_their_zone(client):
    # webserver's HTTP port from the user (public zone), manager's from the webserver.
    rc, out = node_exec(client, "user", "nc -w2 bai-lab-webserver 8080 </dev/null")
    assert rc == 0 and out.strip() == "bai-lab webserver 8080"
    rc, out = node_exec(client, "webserver", "nc -w2 bai-lab-manager 8081 </dev/null")
    assert rc == 0 and out.strip() == "bai-lab manager 8081"
    rc, out = node_exec(client, "manager", "nc -w2 bai-lab-agent1 6001 </dev/null")
    assert rc == 0 and out.strip() == "bai-lab agent1 6001"


def test_user_has_no_route_to_agents(client):
    agent_ip = client.containers.get("bai-lab-agent1").attrs["NetworkSettings"]["Networks"][
        "bai-lab-compute"
    ]["IPAddress"]
    # Positive control: the manager (compute zone, allowed by the host firewall that
    # site.yml converges) does reach the same listener by that address.
    rc, out = node_exec(client, "manager", f"nc -w2 {agent_ip} 6001 </dev/null")
    assert rc == 0 and "agent1 6001" in out
    rc, out = node_exec(client, "user", f"nc -w2 {agent_ip} 6001 </dev/null")
    assert rc != 0 or "agent1" not in out, out


# lab.yml on the lab that is up changes nothing: test_cli_lab's
# test_lab_up_on_the_running_lab_changes_nothing (through `bai-cluster lab up`, which runs
# it, and also checks that no node was recreated or restarted).
