"""The embedded lab (docs/lab.md), checked from the outside and from inside nodes.

Needs a Docker engine and the lab up (`make lab-up`; `make integration` does it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from labtools import LAB_LABEL, LAB_NODE_LABEL, NODES, Lab

pytestmark = [pytest.mark.integration, pytest.mark.lab]

ROOT = Path(__file__).resolve().parents[2]
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


def node_exec(lab: Lab, node: str, cmd: str) -> tuple[int, str]:
    res = lab[node].exec_run(["sh", "-c", cmd])
    return res.exit_code, res.output.decode()


def test_all_nodes_run_with_labels(docker_client):
    found = {
        c.labels[LAB_NODE_LABEL]: c
        for c in docker_client.containers.list(filters={"label": f"{LAB_LABEL}=bai-lab"})
    }
    assert sorted(found) == sorted(NODES)
    assert all(c.status == "running" for c in found.values())


def test_nodes_sit_in_their_zones(lab):
    for node, zones in ZONES.items():
        nets = lab[node].attrs["NetworkSettings"]["Networks"]
        assert {n.removeprefix("bai-lab-") for n in nets} == zones, node


def test_agents_and_managers_run_their_own_engine(lab):
    for node in ["manager", "manager2", "manager3", "agent1", "agent2"]:
        rc, out = node_exec(lab, node, "docker version --format '{{.Server.Version}}'")
        assert rc == 0 and out.strip(), (node, out)
    rc, out = node_exec(lab, "agent1", "docker image inspect bai/session:latest >/dev/null")
    assert rc == 0, "the session image was not loaded into agent1"


def test_agents_share_one_data_folder(lab):
    token = os.urandom(8).hex()
    rc, _out = node_exec(lab, "agent1", f"echo {token} > /srv/bai-data/.lab-test")
    assert rc == 0
    rc, out = node_exec(lab, "agent2", "cat /srv/bai-data/.lab-test")
    assert rc == 0 and out.strip() == token
    node_exec(lab, "agent1", "rm -f /srv/bai-data/.lab-test")


def test_stand_in_listeners_answer_their_zone(lab):
    # webserver's HTTP port from the user (public zone), manager's from the webserver.
    rc, out = node_exec(lab, "user", "nc -w2 bai-lab-webserver 8080 </dev/null")
    assert rc == 0 and out.strip() == "bai-lab webserver 8080"
    rc, out = node_exec(lab, "webserver", "nc -w2 bai-lab-manager 8081 </dev/null")
    assert rc == 0 and out.strip() == "bai-lab manager 8081"
    rc, out = node_exec(lab, "manager", "nc -w2 bai-lab-agent1 6001 </dev/null")
    assert rc == 0 and out.strip() == "bai-lab agent1 6001"


def test_user_has_no_route_to_agents(lab):
    agent_ip = lab["agent1"].attrs["NetworkSettings"]["Networks"]["bai-lab-compute"]["IPAddress"]
    # Positive control: the manager (compute zone, allowed by the host firewall that
    # site.yml converges) does reach the same listener by that address.
    rc, out = node_exec(lab, "manager", f"nc -w2 {agent_ip} 6001 </dev/null")
    assert rc == 0 and "agent1 6001" in out
    rc, out = node_exec(lab, "user", f"nc -w2 {agent_ip} 6001 </dev/null")
    assert rc != 0 or "agent1" not in out, out


# lab.yml on the lab that is up changes nothing: test_cli_lab's
# test_lab_up_on_the_running_lab_changes_nothing (through `bai-cluster lab up`, which runs
# it, and also checks that no node was recreated or restarted).
