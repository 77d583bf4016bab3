"""Cluster sessions on one agent of the embedded lab (default inventory).

The agents are Docker-in-Docker containers (bai-lab-agent1/2) reached with the
docker_api connection; the modules run there on Debian's python3 with python3-docker
5.0.3. Session containers are inspected with ``docker exec bai-lab-agentN docker ...``.
Needs the lab up (make lab-up). Also: a read-only data folder, and size-1 sessions kept
apart on an agent (each on its own bridge).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from labtools import AGENTS, count, data_folder, in_session, inspect, on_agent, started, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAME = "it-lab3"


@pytest.fixture(scope="module")
def data(lab):
    """A folder in the agents' shared data volume (the same on every agent)."""
    with data_folder(lab, NAME) as path:
        yield path


@pytest.fixture(scope="module")
def session3(lab, data, run_playbook):
    sweep(lab, NAME)
    extra = {
        "session_name": NAME,
        "session_size": 3,
        "session_resources": {"cpu": 0.5, "mem": "256m"},
        "session_mounts": [
            {"src": data, "dst": "/home/work/data"},
            {"src": data, "dst": "/data/ro", "readonly": True},
        ],
    }
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        yield run, extra
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
        sweep(lab, NAME)


def test_lab_session_lands_on_one_agent(session3, lab):
    run, _extra = session3
    summary = run.stats["bai_session"]
    agents = {c["agent"] for c in summary["containers"]}
    assert len(agents) == 1 and agents <= set(AGENTS)
    assert summary["mode"] == "single-node"
    assert summary["network"] == f"bai-{NAME}-net"
    agent = agents.pop()
    node = lab[agent]
    code, out = on_agent(node, "docker", "inspect", f"bai-{NAME}-main1")
    assert code == 0, out
    (main1,) = json.loads(out)
    env = dict(item.split("=", 1) for item in main1["Config"]["Env"])
    assert env["BACKENDAI_CLUSTER_HOSTS"] == "main1,sub1,sub2"
    assert env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,sub:2"
    assert env["BACKENDAI_SESSION_ID"] == summary["session_id"] == env["BACKENDAI_KERNEL_ID"]
    assert env["MASTER_ADDR"] == "main1"
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}
    assert main1["HostConfig"]["NanoCpus"] == 500_000_000
    assert list(main1["NetworkSettings"]["Networks"]) == [f"bai-{NAME}-net"]
    port = int(main1["NetworkSettings"]["Ports"]["2200/tcp"][0]["HostPort"])
    assert 30000 <= port <= 31000
    # The other agent has nothing of this session.
    other = lab[next(a for a in AGENTS if a != agent)]
    _code, ids = on_agent(
        other, "docker", "ps", "-aq", "--filter", f"label=ai.backend.cluster.session={NAME}"
    )
    assert ids == ""


def test_lab_ssh_mesh(session3, lab):
    run, _extra = session3
    agent = run.stats["bai_session"]["containers"][0]["agent"]
    hosts = ["main1", "sub1", "sub2"]
    script = "for h in " + " ".join(hosts) + '; do echo "$h=$(ssh $h hostname)"; done'
    for source in hosts:
        code, out = in_session(lab[agent], f"bai-{NAME}-{source}", script)
        assert code == 0, out
        assert out.splitlines() == [f"{h}={h}" for h in hosts]
    code, out = in_session(
        lab[agent], f"bai-{NAME}-main1", "ssh sub2 'echo $BACKENDAI_CLUSTER_HOST'"
    )
    assert (code, out) == (0, "sub2")


def test_lab_data_folder_is_the_same_on_every_agent(session3, lab, data):
    run, _extra = session3
    agent = run.stats["bai_session"]["containers"][0]["agent"]
    code, out = in_session(
        lab[agent], f"bai-{NAME}-sub1", "echo from-sub1 > /home/work/data/note.txt"
    )
    assert code == 0, out
    for node in lab.agents.values():  # both agents see the file in the shared folder
        assert on_agent(node, "cat", f"{data}/note.txt") == (0, "from-sub1")


def test_lab_read_only_mount_reads_but_refuses_writes(session3, lab, data):
    run, _extra = session3
    agent = run.stats["bai_session"]["containers"][0]["agent"]
    container = f"bai-{NAME}-main1"
    assert on_agent(lab[agent], "sh", "-c", f"echo ro-data > {data}/ro.txt")[0] == 0
    assert in_session(lab[agent], container, "cat /data/ro/ro.txt") == (0, "ro-data")
    code, out = in_session(lab[agent], container, "echo x > /data/ro/new.txt")
    assert code != 0 and "Read-only file system" in out, out
    code, out = in_session(lab[agent], container, "rm /data/ro/ro.txt")
    assert code != 0 and "Read-only file system" in out, out
    mounts = {m["Destination"]: m for m in inspect(lab[agent], container)["Mounts"]}
    assert (mounts["/data/ro"]["Source"], mounts["/data/ro"]["RW"]) == (data, False)
    assert mounts["/home/work/data"]["RW"] is True


def test_lab_rerun_is_a_no_op_and_list_shows_it(session3, lab, run_playbook):
    run, extra = session3
    before = started(lab, run.stats["bai_session"])
    again = run_playbook("session_create.yml", extra_vars=extra)
    assert again.rc == 0, again
    assert again.changed() == 0
    # The very same containers, never restarted.
    assert started(lab, run.stats["bai_session"]) == before
    assert again.stats["bai_session"]["session_id"] == run.stats["bai_session"]["session_id"]
    listed = run_playbook("session_list.yml")
    assert listed.rc == 0, listed
    (row,) = [r for r in listed.stats["bai_sessions"] if r["name"] == NAME]
    assert row["state"] == "running"
    assert row["agents"] == [run.stats["bai_session"]["containers"][0]["agent"]]


def test_lab_single_node_too_big_for_any_agent_is_pending(lab, run_playbook):
    extra = {"session_name": "it-lab-big", "session_size": 5}  # agents offer 4 CPUs each
    run = run_playbook("session_create.yml", extra_vars=extra)
    assert run.rc != 0
    text = " ".join(run.failures)
    assert "PENDING" in text and "multi-node" in text, run
    assert count(lab, "it-lab-big") == 0


def test_lab_missing_image_fails_clearly(lab, run_playbook):
    extra = {"session_name": "it-lab-img", "session_size": 2, "session_image": "bai/nope:1"}
    run = run_playbook("session_create.yml", extra_vars=extra)
    assert run.rc != 0
    assert any("image bai/nope:1 not on agent" in f for f in run.failures), run
    assert count(lab, "it-lab-img") == 0


def test_lab_size1_sessions_on_one_agent_cannot_reach_each_other(lab, run_playbook):
    """Size-1 sessions on one agent, each on its own bridge: one session's container
    cannot connect to another's, while the agent itself still can (docs/networks.md)."""
    filler, first, second = "it-lab-icc-fill", "it-lab-icc-a", "it-lab-icc-b"
    names = (filler, first, second)
    for name in names:
        sweep(lab, name)
    # The filler takes all the memory of an agent (8g; not CPUs: a container cannot have
    # more than the lab machine's 2), so both sessions under test land on the other.
    memory = {filler: "8g", first: "256m", second: "256m"}

    def create(name):
        extra = {
            "session_name": name,
            "session_size": 1,
            "session_resources": {"cpu": 0.5, "mem": memory[name]},
        }
        made = run_playbook("session_create.yml", extra_vars=extra)
        assert made.rc == 0, made
        return made.stats["bai_session"]

    def destroy(name):
        run_playbook("session_destroy.yml", extra_vars={"session_name": name})
        sweep(lab, name)

    summaries = {}
    try:
        summaries[filler] = create(filler)
        # The two can be placed at the same moment: either only fits on the other agent.
        with ThreadPoolExecutor(2) as pool:
            summaries.update(zip((first, second), pool.map(create, (first, second))))
        agents = {n: summaries[n]["containers"][0]["agent"] for n in names}
        assert agents[first] == agents[second] != agents[filler], agents
        node = lab[agents[first]]
        # The documented mechanism: each on a bridge of its own; Docker drops traffic
        # between two of its networks (the default bridge's icc no longer matters).
        addresses = {}
        for name in (first, second):
            networks = inspect(node, f"bai-{name}-main1")["NetworkSettings"]["Networks"]
            assert list(networks) == [f"bai-{name}-net"], name
            addresses[name] = networks[f"bai-{name}-net"]["IPAddress"]
        banner = f"exec 3<>/dev/tcp/{addresses[second]}/2200 && head -c 7 <&3"
        # Positive control: the second session's sshd answers on that address.
        assert on_agent(node, "timeout", "5", "bash", "-c", banner) == (0, "SSH-2.0")
        # The first session's container cannot even connect: the packets are dropped.
        code, out = in_session(node, f"bai-{first}-main1", f"timeout 3 bash -c '{banner}'")
        assert code == 124 and "SSH" not in out, (code, out)
        # Destroy takes the container and its bridge; a second destroy changes nothing.
        assert count(lab, second) == 2
        gone = run_playbook("session_destroy.yml", extra_vars={"session_name": second})
        assert gone.rc == 0 and count(lab, second) == 0, gone
        again = run_playbook("session_destroy.yml", extra_vars={"session_name": second})
        assert again.rc == 0 and again.changed() == 0, again
    finally:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(destroy, names))
