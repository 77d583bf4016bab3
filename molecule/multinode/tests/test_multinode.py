"""Verify the multinode scenario: the swarm site.yml built, then a real multi-node session.

The session is created and destroyed through the toolkit's own API (bai_cli.api, the
same session playbooks the CLI runs) against Molecule's inventory; everything is then
checked on the nodes themselves with testinfra (the agents' engines, docker exec into
the session containers).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
import testinfra

from bai_cli import api

INVENTORY = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
NODES = ("manager", "agent1", "agent2")
AGENTS = ("bai-mol-mn-agent1", "bai-mol-mn-agent2")
NAME = "mol-mn"
HOSTS = ["main1", "sub1", "sub2"]
LABEL = "ai.backend.cluster.session"
DATA = "/srv/bai-data/mol-mn"

# Each test runs once (on the manager); the other nodes are reached through `node()`.
testinfra_hosts = ["ansible://bai-mol-mn-manager"]


def node(name: str):
    return testinfra.get_host(f"ansible://bai-mol-mn-{name}?ansible_inventory={INVENTORY}")


def left_on_nodes(name: str) -> dict[str, list[str]]:
    """Containers and networks labelled with the session, per node."""
    found = {}
    for short in NODES:
        host = node(short)
        out = host.check_output(
            f"docker ps -aq --filter label={LABEL}={name}; "
            f"docker network ls -q --filter label={LABEL}={name}"
        )
        found[short] = out.split()
    return found


def in_container(agent: str, host: str, command: str):
    return node(agent.removeprefix("bai-mol-mn-")).run(
        "docker exec -u work bai-%s-%s bash -c %s", NAME, host, command
    )


@pytest.fixture(scope="module")
def session():
    # The folder every container mounts; the agents share /srv/bai-data.
    node("agent1").check_output(f"mkdir -p {DATA} && chmod 777 {DATA}")
    made = api.create_session(
        NAME,
        3,
        inventory=INVENTORY,
        mode="multi-node",
        # 3 x 1 CPU do not fit one agent's 2 CPUs: the session must span both agents.
        resources={"cpu": 1, "mem": "512m"},
        mounts=[{"src": DATA, "dst": "/home/work/data"}],
    )
    try:
        yield made
    finally:
        api.destroy_session(NAME, inventory=INVENTORY)
        node("agent1").run(f"rm -rf {DATA}")


def test_swarm_has_the_manager_and_both_agents(host):
    out = host.check_output("docker node ls --format '{{json .}}'")
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 3, rows
    assert all(r["Status"] == "Ready" and r["Availability"] == "Active" for r in rows), rows
    assert [r["ManagerStatus"] for r in rows].count("Leader") == 1, rows


NODE_CERT = "/var/lib/docker/swarm/certificates/swarm-node.crt"
CERT_SUBJECT = (
    "import json, ssl, sys; "
    "subject = ssl._ssl._test_decode_cert(sys.argv[1])['subject']; "
    "print(json.dumps({k: v for rdn in subject for k, v in rdn}))"
)


def test_agents_are_workers_of_that_swarm(host):
    """The agents are in *the manager's* swarm, not merely in one: each agent's node
    certificate (issued by the swarm's CA) names the manager's cluster ID and the agent's
    node ID as a worker, the manager lists that node ID with the agent's hostname and
    address, and the agent's remote manager is the manager."""
    manager = json.loads(host.check_output("docker info --format '{{json .Swarm}}'"))
    cluster = manager["Cluster"]["ID"]
    listed = {
        n["ID"]: n
        for n in json.loads(host.check_output("docker node ls -q | xargs docker node inspect"))
    }
    for short in ("agent1", "agent2"):
        agent = node(short)
        info = json.loads(agent.check_output("docker info --format '{{json .Swarm}}'"))
        assert info["LocalNodeState"] == "active" and not info["ControlAvailable"], info
        subject = json.loads(agent.check_output("python3 -c %s %s", CERT_SUBJECT, NODE_CERT))
        assert subject == {
            "organizationName": cluster,
            "organizationalUnitName": "swarm-worker",
            "commonName": info["NodeID"],
        }, (short, subject)
        member = listed[info["NodeID"]]
        assert member["Description"]["Hostname"] == agent.check_output("hostname")
        assert member["Status"]["Addr"] == info["NodeAddr"]
        assert member["Spec"]["Role"] == "worker"
        assert [m["NodeID"] for m in info["RemoteManagers"]] == [manager["NodeID"]]


def test_destroy_leaves_nothing_on_any_node(host):
    # Runs before the shared session exists (it needs 3 of the 4 CPUs the agents offer);
    # `host` keeps it in the group of host-parametrized tests, which pytest runs first.
    name = "mol-mn-gone"
    api.create_session(
        name, 3, inventory=INVENTORY, mode="multi-node", resources={"cpu": 1, "mem": "256m"}
    )
    try:
        made = left_on_nodes(name)
        # 3 containers (and the overlay's local copies) on the agents, the overlay on the
        # manager.
        assert sum(len(made[a]) for a in ("agent1", "agent2")) >= 3, made
        assert host.run("docker network ls -q --filter label=%s=%s", LABEL, name).stdout.strip()
    finally:
        gone = api.destroy_session(name, inventory=INVENTORY)
    assert len(gone.containers) == 3
    assert left_on_nodes(name) == {short: [] for short in NODES}


def test_session_spans_both_agents_on_the_overlay(session, host):
    assert session.mode == "multi-node" and session.network_driver == "overlay"
    where = {c.host: c.agent for c in session.containers}
    assert sorted(where) == sorted(HOSTS)
    assert set(where.values()) == set(AGENTS), where
    driver = host.check_output(
        "docker network inspect -f '{{.Driver}} {{.Scope}} {{.Attachable}}' %s", session.network
    )
    assert driver == "overlay swarm true"


def test_environment_says_multi_node(session):
    for c in session.containers:
        env = in_container(c.agent, c.host, "env").stdout
        values = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
        assert values["BACKENDAI_CLUSTER_MODE"] == "multi-node"
        assert values["BACKENDAI_CLUSTER_HOST"] == c.host
        assert values["BACKENDAI_CLUSTER_HOSTS"] == ",".join(HOSTS)
        assert values["MASTER_ADDR"] == "main1"


def test_ssh_crosses_agents_without_a_prompt(session):
    where = {c.host: c.agent for c in session.containers}
    for source, target in itertools.product(HOSTS, HOSTS):
        result = in_container(where[source], source, f"ssh -o BatchMode=yes {target} hostname")
        assert (result.rc, result.stdout.strip()) == (0, target), (source, target, result.stderr)


def test_a_file_written_on_one_agent_is_read_on_the_other(session):
    by_agent = {}
    for c in session.containers:
        by_agent.setdefault(c.agent, c.host)
    writer, reader = by_agent[AGENTS[0]], by_agent[AGENTS[1]]
    wrote = in_container(AGENTS[0], writer, f"echo from-{writer} > /home/work/data/mn.txt")
    assert wrote.rc == 0, wrote.stderr
    read = in_container(AGENTS[1], reader, "cat /home/work/data/mn.txt")
    assert (read.rc, read.stdout.strip()) == (0, f"from-{writer}")
