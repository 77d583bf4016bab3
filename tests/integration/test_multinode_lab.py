"""Cluster sessions that span the lab's two agents over a Swarm overlay.

site.yml has made the swarm (manager + agent1 + agent2). A session whose containers do
not fit on one agent (4 CPUs each) spreads across both; the overlay network is created
on the manager and the agents' engines attach to it when their containers start. The
tests look at the real containers on both agents: where they run, the network, the
environment, SSH between every pair across agents, the shared data folder, re-run and
clean destroy (containers on both agents and the overlay on the manager), rollback of a
create that failed on one agent, the overlay's MTU, and waiting for capacity.
"""

from __future__ import annotations

import itertools
import json
import shlex
import threading
import time

import pytest
from conftest import ansible_playbook
from labtools import (
    AGENTS,
    count,
    data_folder,
    in_session,
    inspect,
    on_agent,
    spanning_session,
    started,
    sweep,
)

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAME = "it-mn3"
HOSTS = ["main1", "sub1", "sub2"]
EXTRA = spanning_session(NAME)


@pytest.fixture(scope="module")
def data(lab):
    with data_folder(lab, NAME) as path:
        yield path


@pytest.fixture(scope="module")
def session(lab, manager, data, run_playbook):
    sweep(lab, NAME)
    extra = {**EXTRA, "session_mounts": [{"src": data, "dst": "/home/work/data"}]}
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        where = {c["host"]: c["agent"] for c in summary["containers"]}
        yield run, extra, summary, where
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
        sweep(lab, NAME)


def destroyed(lab, name):
    """Destroy a session with the playbook, then sweep whatever is left."""
    ansible_playbook("session_destroy.yml", extra_vars={"session_name": name})
    sweep(lab, name)


def container_env(node, container) -> dict:
    """The environment a process in the container really sees (docker exec env)."""
    code, out = in_session(node, container, "env")
    assert code == 0, out
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def events(node, since: int, *filters: str) -> list[str]:
    """'Action name' of the Docker events on the node since `since` (epoch seconds)."""
    argv = ["docker", "events", "--since", str(since), "--until", str(int(time.time()) + 1)]
    for item in filters:
        argv += ["--filter", item]
    code, out = on_agent(node, *argv, "--format", "{{.Action}} {{.Actor.Attributes.name}}")
    assert code == 0, out
    return out.splitlines()


def interface_mtu(node, container, address) -> int:
    """MTU of the container's interface that carries `address` (ip -o link)."""
    code, out = in_session(node, container, "ip -o -4 addr show")
    assert code == 0, out
    (dev,) = [f.split()[1] for f in out.splitlines() if f.split()[3].startswith(f"{address}/")]
    code, out = in_session(node, container, f"ip -o link show dev {dev}")
    assert code == 0, out
    words = out.split()
    return int(words[words.index("mtu") + 1])


# Runs before the shared session below exists: it needs 6 of the lab's 8 CPUs.
def test_destroy_removes_everything_on_every_agent_and_the_manager(lab, manager, run_playbook):
    name = "it-mn-gone"
    sweep(lab, name)
    made = run_playbook("session_create.yml", extra_vars={**EXTRA, "session_name": name})
    assert made.rc == 0, made
    # 3 containers on the agents; the overlay on the manager and on each agent that
    # attached a container.
    assert count(lab, name) >= 4
    gone = run_playbook("session_destroy.yml", extra_vars={"session_name": name})
    assert gone.rc == 0, gone
    assert count(lab, name) == 0
    again = run_playbook("session_destroy.yml", extra_vars={"session_name": name})
    assert again.rc == 0 and again.changed() == 0, again


# Two containers of 5g cannot share an agent (8g each): the session must span both. (Not
# CPUs: a container cannot be given more than the 2 CPUs of the machine under the lab.)
SPREAD = {
    "session_size": 2,
    "session_mode": "multi-node",
    "session_resources": {"cpu": 0.5, "mem": "5g"},
}


def test_failure_on_one_agent_rolls_back_every_agent_and_the_overlay(lab, manager, run_playbook):
    name, image = "it-mn-rollback", "bai/onlyone:test"
    extra = {**SPREAD, "session_name": name, "session_image": image, "session_ssh_timeout_s": 30}
    sweep(lab, name)
    try:
        # The image is on agent1 only: the plan needs both agents, so the create stops
        # before anything is made and names the agent that lacks it.
        code, out = on_agent(lab["agent1"], "docker", "tag", "bai/session:latest", image)
        assert code == 0, out
        run = run_playbook("session_create.yml", extra_vars=extra)
        assert run.rc != 0
        text = " ".join(run.failures)
        assert f"image {image} not on agent agent2" in text, run
        assert "not on agent agent1" not in text, run
        assert count(lab, name) == 0

        # Now agent2 has an image of that name whose containers exit at once: agent1 makes
        # its containers and the manager the overlay, agent2 fails, and the rollback has
        # to remove agent1's part and the overlay too.
        code, out = on_agent(
            lab["agent2"],
            "sh",
            "-c",
            f"printf 'FROM bai/session:latest\\nENTRYPOINT [\"/bin/false\"]\\n' "
            f"| docker build -q -t {image} -",
        )
        assert code == 0, out
        since = int(time.time()) - 1
        run = run_playbook("session_create.yml", extra_vars=extra)
        assert run.rc != 0
        text = " ".join(run.failures)
        assert f"session {name} was not created" in text, run
        assert "on agent agent2 stopped (exit code 1) before sshd came up" in text, run
        assert "(everything made for it was removed)" in text, run
        assert count(lab, name) == 0
        # It really was made part-way: agent1 created (and started) its containers and
        # removed them again; the manager created the overlay and removed it.
        label = f"label=ai.backend.cluster.session={name}"
        made = events(lab["agent1"], since, "type=container", label)
        assert any(e.startswith("start ") for e in made), made
        assert any(e.startswith("destroy ") for e in made), made
        nets = [e for e in events(manager, since, "type=network") if e.endswith(f" bai-{name}-net")]
        assert any(e.startswith("create ") for e in nets), nets
        assert any(e.startswith("remove ") for e in nets), nets
    finally:
        destroyed(lab, name)
        for node in lab.agents.values():
            on_agent(node, "docker", "rmi", "-f", image)


def test_overlay_gets_session_network_mtu(lab, manager, run_playbook):
    name, mtu = "it-mn-mtu", 1400
    extra = {**SPREAD, "session_name": name, "session_network_mtu": mtu}
    sweep(lab, name)
    try:
        run = run_playbook("session_create.yml", extra_vars=extra)
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        assert summary["network_driver"] == "overlay"
        assert {c["agent"] for c in summary["containers"]} == set(AGENTS)
        net = summary["network"]
        code, out = on_agent(manager, "docker", "network", "inspect", "-f", "{{json .}}", net)
        assert code == 0, out
        # Docker's overlay driver gives containers its option minus the VXLAN header.
        assert json.loads(out)["Options"]["com.docker.network.driver.mtu"] == str(mtu + 50)
        for item in summary["containers"]:
            node = lab[item["agent"]]
            address = inspect(node, item["container"])["NetworkSettings"]["Networks"][net]
            assert interface_mtu(node, item["container"], address["IPAddress"]) == mtu, item
    finally:
        destroyed(lab, name)


def test_pending_session_waits_and_is_created_once_capacity_frees(lab, manager, run_playbook):
    holder, waiter, delay, wait_s = "it-mn-waitx", "it-mn-waity", 8, 60
    # The waiter needs all the memory of both agents; the holder takes 1g of one.
    extra = {**SPREAD, "session_name": waiter, "session_resources": {"cpu": 0.5, "mem": "8g"}}
    extra |= {"session_wait_s": wait_s, "session_wait_delay_s": 2}
    for name in (holder, waiter):
        sweep(lab, name)
    outcome = {}

    def create():
        begun = time.monotonic()
        outcome["run"] = ansible_playbook("session_create.yml", extra_vars=extra)
        outcome["took"] = time.monotonic() - begun

    thread = threading.Thread(target=create)
    try:
        made = run_playbook(
            "session_create.yml",
            extra_vars={
                "session_name": holder,
                "session_size": 1,
                "session_resources": {"cpu": 0.5, "mem": "1g"},
            },
        )
        assert made.rc == 0, made
        thread.start()
        time.sleep(delay)
        assert thread.is_alive(), outcome  # still waiting for the holder's memory
        gone = run_playbook("session_destroy.yml", extra_vars={"session_name": holder})
        assert gone.rc == 0, gone
        thread.join(timeout=wait_s + 120)
        run = outcome["run"]
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        assert summary["action"] == "create"
        assert {c["agent"] for c in summary["containers"]} == set(AGENTS)
        assert delay < outcome["took"] < wait_s, outcome["took"]
        # The playbook itself saw PENDING and asked the ledger again, session_wait_delay_s apart.
        waited = [
            task["hosts"]["localhost"]
            for play in run.result["plays"]
            for task in play["tasks"]
            if task["task"]["name"].startswith("Place the session on the agents once capacity")
        ]
        assert any(res.get("attempts", 0) >= 2 for res in waited), waited
    finally:
        destroyed(lab, holder)
        if thread.is_alive():  # let the waiter finish before it is destroyed
            thread.join(timeout=wait_s + 120)
        destroyed(lab, waiter)


def test_session_spans_both_agents_on_an_overlay(session, lab, manager):
    _run, _extra, summary, where = session
    assert summary["mode"] == "multi-node"
    assert summary["network_driver"] == "overlay"
    assert set(where) == set(HOSTS)
    assert set(where.values()) == set(AGENTS)
    # The overlay is a swarm network owned by the manager, attachable, labelled.
    code, out = on_agent(
        manager,
        "docker",
        "network",
        "inspect",
        "-f",
        "{{.Driver}} {{.Scope}} {{.Attachable}}",
        summary["network"],
    )
    assert (code, out) == (0, "overlay swarm true")
    for host, agent in where.items():
        info = inspect(lab[agent], f"bai-{NAME}-{host}")
        assert list(info["NetworkSettings"]["Networks"]) == [summary["network"]]
        env = dict(item.split("=", 1) for item in info["Config"]["Env"])
        assert env["BACKENDAI_CLUSTER_MODE"] == "multi-node"
        assert env["BACKENDAI_CLUSTER_HOSTS"] == ",".join(HOSTS)
        assert env["BACKENDAI_CLUSTER_HOST"] == host
        assert env["MASTER_ADDR"] == "main1"
        assert info["HostConfig"]["NanoCpus"] == 2_000_000_000
        published = info["NetworkSettings"]["Ports"].get("2200/tcp")
        assert bool(published) == (host == "main1"), (host, published)


def test_ssh_between_every_pair_across_agents(session, lab):
    """Behind the host firewall, as every lab session is: each agent's table is loaded
    and drops what it does not allow on input while the mesh crosses agents."""
    _run, _extra, _summary, where = session
    for agent in sorted(set(where.values())):
        code, out = on_agent(lab[agent], "nft", "list", "chain", "inet", "bai_firewall", "input")
        assert code == 0 and "hook input" in out and "policy drop;" in out, (agent, out)
    for source, target in itertools.product(HOSTS, HOSTS):
        code, out = in_session(
            lab[where[source]],
            f"bai-{NAME}-{source}",
            f"ssh -o BatchMode=yes {target} 'echo $BACKENDAI_CLUSTER_HOST'",
        )
        assert (code, out) == (0, target), (source, target, out)


# In every container: the interface the toolkit names carries main1's address (main1) or
# the route to it (the others), over SSH logins as in docker exec; prints the name.
IFNAME_CHECK = (
    'ip=$(getent hosts main1 | cut -d" " -f1); dev=$NCCL_SOCKET_IFNAME; '
    'test "$GLOO_SOCKET_IFNAME $OMPI_MCA_btl_tcp_if_include $OMPI_MCA_oob_tcp_if_include" '
    '= "$dev $dev $dev" && { ip -o -4 addr show dev "$dev" | grep -q "inet $ip/" '
    '|| ip -o route get "$ip" | grep -q " dev $dev "; } && echo "$dev"'
)


def test_interface_variables_name_the_overlay_in_every_container(session, lab):
    """Not docker_gwbridge's interface, which the other agents cannot reach: launchers
    need no interface flags (test_distributed.py runs mpirun and torchrun without)."""
    _run, _extra, _summary, where = session
    for host, agent in where.items():
        container = f"bai-{NAME}-{host}"
        code, out = in_session(lab[agent], container, IFNAME_CHECK)
        assert (code, out) == (0, "eth0"), (host, out)
        code, out = in_session(lab[agent], container, f"ssh {host} {shlex.quote(IFNAME_CHECK)}")
        assert (code, out) == (0, "eth0"), (host, out)
        # The other interface is docker_gwbridge's: the toolkit must not name it.
        code, out = in_session(lab[agent], container, "ip -o -4 addr show dev eth1")
        assert code == 0 and "inet 10.2" in out, (host, out)


def test_data_folder_is_shared_across_agents(session, lab):
    _run, _extra, _summary, where = session
    writer = next(h for h in HOSTS if where[h] == "agent1")
    reader = next(h for h in HOSTS if where[h] == "agent2")
    code, out = in_session(
        lab["agent1"], f"bai-{NAME}-{writer}", f"echo {writer} > /home/work/data/mn.txt"
    )
    assert code == 0, out
    assert in_session(lab["agent2"], f"bai-{NAME}-{reader}", "cat /home/work/data/mn.txt") == (
        0,
        writer,
    )


def test_rerun_changes_nothing_and_list_shows_both_agents(session, lab, run_playbook):
    _run, extra, summary, _where = session
    before = started(lab, summary)
    again = run_playbook("session_create.yml", extra_vars=extra)
    assert again.rc == 0, again
    assert again.changed() == 0
    # The very same containers, never restarted.
    assert started(lab, summary) == before
    assert again.stats["bai_session"]["session_id"] == summary["session_id"]
    listed = run_playbook("session_list.yml")
    assert listed.rc == 0, listed
    (row,) = [r for r in listed.stats["bai_sessions"] if r["name"] == NAME]
    assert row["state"] == "running"
    assert sorted(row["agents"]) == sorted(AGENTS)


def test_multi_node_that_fits_one_agent_collapses_onto_it(lab, manager, run_playbook):
    name = "it-mn-small"
    sweep(lab, name)
    extra = {**EXTRA, "session_name": name, "session_resources": {"cpu": 0.5, "mem": "256m"}}
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        assert summary["mode"] == "single-node"
        assert summary["network_driver"] == "bridge"
        # What really exists: every container on one agent, the other agent has none.
        label = f"label=ai.backend.cluster.session={name}"
        found = {}
        for agent, node in lab.agents.items():
            _code, out = on_agent(node, "docker", "ps", "-aq", "--filter", label)
            found[agent] = len(out.split())
        (agent,) = [a for a, n in found.items() if n]
        assert found[agent] == len(HOSTS), found
        node, net = lab[agent], f"bai-{name}-net"
        for host in HOSTS:
            info = inspect(node, f"bai-{name}-{host}")
            assert list(info["NetworkSettings"]["Networks"]) == [net], host
            assert info["Config"]["Labels"]["ai.backend.cluster.mode"] == "single-node"
        # Their network is a local bridge on that agent, and no overlay exists for it.
        code, out = on_agent(node, "docker", "network", "inspect", "-f", "{{.Driver}}", net)
        assert (code, out) == (0, "bridge")
        _code, out = on_agent(manager, "docker", "network", "ls", "-q", "--filter", label)
        assert out == ""
        # Inside, the environment describes a single-node session of three.
        env = container_env(node, f"bai-{name}-main1")
        assert env["BACKENDAI_CLUSTER_SIZE"] == str(len(HOSTS))
        assert env["BACKENDAI_CLUSTER_HOSTS"] == ",".join(HOSTS)
        assert env["BACKENDAI_CLUSTER_MODE"] == "single-node"
        assert env["MASTER_ADDR"] == "main1"
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": name})
        sweep(lab, name)


def test_too_big_for_both_agents_is_pending_and_makes_nothing(lab, manager, run_playbook):
    name = "it-mn-big"
    extra = {**EXTRA, "session_name": name, "session_size": 5}  # 10 CPUs > 2 x 4
    run = run_playbook("session_create.yml", extra_vars=extra)
    assert run.rc != 0
    assert any("PENDING" in f for f in run.failures), run
    assert count(lab, name) == 0
