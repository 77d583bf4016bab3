"""Cluster sessions that span the lab's two agents over a Swarm overlay.

site.yml has made the swarm (manager + agent1 + agent2). A session whose containers do
not fit on one agent (4 CPUs each) spreads across both; the overlay network is created
on the manager and the agents' engines attach to it when their containers start. The
tests look at the real containers on both agents: where they run, the network, the
environment, SSH between every pair across agents, the shared data folder, re-run and
clean destroy (containers on both agents and the overlay on the manager).
"""

from __future__ import annotations

import itertools

import pytest
from labtools import AGENTS, count, in_session, inspect, lab_agents, on_agent, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAME = "it-mn3"
SHARED = "/srv/bai-data"
HOSTS = ["main1", "sub1", "sub2"]
# 3 x 2 CPUs cannot fit on one 4-CPU agent: the session must span both.
EXTRA = {
    "session_name": NAME,
    "session_size": 3,
    "session_mode": "multi-node",
    "session_resources": {"cpu": 2, "mem": "512m"},
}


@pytest.fixture(scope="module")
def lab(docker_client):
    return lab_agents(docker_client)


@pytest.fixture(scope="module")
def manager(docker_client, lab):
    return docker_client.containers.get("bai-lab-manager")


@pytest.fixture(scope="module")
def data(lab):
    path = f"{SHARED}/{NAME}"
    code, out = on_agent(lab["agent1"], "bash", "-c", f"mkdir -p {path} && chmod 777 {path}")
    assert code == 0, out
    yield path
    on_agent(lab["agent1"], "rm", "-rf", path)


@pytest.fixture(scope="module")
def session(lab, manager, data, run_playbook):
    sweep(lab, NAME, manager)
    extra = {**EXTRA, "session_mounts": [{"src": data, "dst": "/home/work/data"}]}
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        where = {c["host"]: c["agent"] for c in summary["containers"]}
        yield run, extra, summary, where
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
        sweep(lab, NAME, manager)


# Runs before the shared session below exists: it needs 6 of the lab's 8 CPUs.
def test_destroy_removes_everything_on_every_agent_and_the_manager(lab, manager, run_playbook):
    name = "it-mn-gone"
    sweep(lab, name, manager)
    made = run_playbook("session_create.yml", extra_vars={**EXTRA, "session_name": name})
    assert made.rc == 0, made
    # 3 containers on the agents; the overlay on the manager and on each agent that
    # attached a container.
    assert count(lab, name, manager) >= 4
    gone = run_playbook("session_destroy.yml", extra_vars={"session_name": name})
    assert gone.rc == 0, gone
    assert count(lab, name, manager) == 0
    again = run_playbook("session_destroy.yml", extra_vars={"session_name": name})
    assert again.rc == 0 and again.changed() == 0, again


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
    _run, _extra, _summary, where = session
    for source, target in itertools.product(HOSTS, HOSTS):
        code, out = in_session(
            lab[where[source]],
            f"bai-{NAME}-{source}",
            f"ssh -o BatchMode=yes {target} 'echo $BACKENDAI_CLUSTER_HOST'",
        )
        assert (code, out) == (0, target), (source, target, out)


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


def test_rerun_changes_nothing_and_list_shows_both_agents(session, run_playbook):
    _run, extra, summary, _where = session
    again = run_playbook("session_create.yml", extra_vars=extra)
    assert again.rc == 0, again
    assert again.changed() == 0
    assert again.stats["bai_session"]["session_id"] == summary["session_id"]
    listed = run_playbook("session_list.yml")
    assert listed.rc == 0, listed
    (row,) = [r for r in listed.stats["bai_sessions"] if r["name"] == NAME]
    assert row["state"] == "running"
    assert sorted(row["agents"]) == sorted(AGENTS)


def test_multi_node_that_fits_one_agent_collapses_onto_it(lab, manager, run_playbook):
    name = "it-mn-small"
    sweep(lab, name, manager)
    extra = {**EXTRA, "session_name": name, "session_resources": {"cpu": 0.5, "mem": "256m"}}
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        assert len({c["agent"] for c in summary["containers"]}) == 1
        assert summary["mode"] == "single-node"
        assert summary["network_driver"] == "bridge"
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": name})
        sweep(lab, name, manager)


def test_too_big_for_both_agents_is_pending_and_makes_nothing(lab, manager, run_playbook):
    name = "it-mn-big"
    extra = {**EXTRA, "session_name": name, "session_size": 5}  # 10 CPUs > 2 x 4
    run = run_playbook("session_create.yml", extra_vars=extra)
    assert run.rc != 0
    assert any("PENDING" in f for f in run.failures), run
    assert count(lab, name, manager) == 0
