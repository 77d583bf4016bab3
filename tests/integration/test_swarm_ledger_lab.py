"""The session ledger in the swarm's raft store, served by any of the lab's three managers.

site.yml has made a swarm of three managers (manager, manager2, manager3) and two agents.
The session ledger is the labels of config ``bai-session-ledger``, read and written through
whichever manager answers, with a compare-and-swap on the object's version. The tests
look at what the engines run (the session containers on the agents, their CPUs) and at
the config as each manager's engine shows it; never at a file on a host.

- the ledger is one swarm object that every manager serves, and no file ledger has the session;
- with the first manager stopped (``docker stop bai-lab-manager``), create (a session over
  both agents, on an overlay made through another manager), list, show and destroy work,
  and the manager comes back into the quorum;
- ten creates at once through the three managers give out no more than the agents offer;
  the ledger holds exactly the sessions the engines run;
- four queued creates through the three managers, then two scheduler passes through two
  managers at once after a destroy: each session starts exactly once, within the offer;
- a ledger of 500 sessions fits the store (written and read back through the managers).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from conftest import bai_cli, create_at_once, finish_playbook, start_playbook
from labtools import on_agent, spanning_by_memory, sweep, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.lab]

MANAGERS = ("manager", "manager2", "manager3")
OFFER_CPU = 4  # inventories/lab/group_vars/agents.yml


@pytest.fixture(scope="module")
def managers(lab):
    return {name: lab[name] for name in MANAGERS}


def ledger_via(manager) -> dict:
    """The session ledger as this manager's engine reads it from the raft store."""
    code, out = on_agent(manager, "docker", "config", "inspect", store_.CONFIG_NAME)
    assert code == 0, out
    return json.loads(json.loads(out)[0]["Spec"]["Labels"][store_.LEDGER_LABEL])


def session_cpus(agent) -> dict[str, float]:
    """Session container -> its CPUs (HostConfig.NanoCpus), every state, on this engine."""
    code, ids = on_agent(agent, "docker", "ps", "-aq", "--filter", f"label={LABEL_SESSION}")
    assert code == 0, ids
    if not ids:
        return {}
    code, out = on_agent(agent, "docker", "inspect", *ids.split())
    assert code == 0, out
    return {c["Name"].lstrip("/"): c["HostConfig"]["NanoCpus"] / 1e9 for c in json.loads(out)}


def sessions_on(lab) -> set[str]:
    names = set()
    for agent in lab.agents.values():
        code, out = on_agent(
            agent, "docker", "ps", "-a", "--format", f'{{{{.Label "{LABEL_SESSION}"}}}}'
        )
        assert code == 0, out
        names |= set(out.split())
    return names


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return bai_cli(None, *args, timeout=timeout)


def manager_status(manager, host: str) -> str:
    code, out = on_agent(
        manager, "docker", "node", "inspect", host, "--format", "{{.ManagerStatus.Reachability}}"
    )
    return out if code == 0 else f"error: {out}"


def test_the_ledger_is_one_swarm_object_that_every_manager_serves(lab, managers, run_playbook):
    name = "it-swl1"
    sweep(lab, name)
    run = run_playbook(
        "session_create.yml",
        extra_vars={"session_name": name, "session_size": 1, "session_resources": {"cpu": 0.5}},
    )
    try:
        assert run.rc == 0, run
        session_id = run.stats["bai_session"]["session_id"]
        # The same object, at the same version, through each manager's engine.
        seen = [ledger_via(m)["sessions"][name] for m in managers.values()]
        assert all(entry == seen[0] for entry in seen), seen
        assert seen[0]["session_id"] == session_id and seen[0]["state"] == document.READY
        # No file ledger knows it (a lab that an older version used may keep one).
        for node in [*managers.values(), *lab.agents.values()]:
            _code, out = on_agent(node, "cat", "/var/lib/bai-cluster/ledger.json")
            assert session_id not in out, node.name
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": name})
        sweep(lab, name)
    assert all(name not in ledger_via(m)["sessions"] for m in managers.values())


@pytest.fixture
def first_manager_stopped(managers):
    """bai-lab-manager stopped (the swarm keeps its quorum with two of three managers);
    started again afterwards, and back in the quorum before the next test."""
    first = managers["manager"]
    first.stop(timeout=5)
    try:
        yield first
    finally:
        first.start()
        wait_for(
            lambda: manager_status(managers["manager2"], "manager") == "reachable",
            "bai-lab-manager back in the swarm's quorum",
        )


def test_create_list_show_and_destroy_work_with_the_first_manager_stopped(
    lab, managers, first_manager_stopped, run_playbook
):
    name = "it-swl2"
    sweep(lab, name)
    # It spans both agents on an overlay, which must be made through a manager that answers.
    extra = spanning_by_memory(name)
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        assert summary["network_driver"] == "overlay", summary
        assert {c["agent"] for c in summary["containers"]} == {"agent1", "agent2"}
        # What the engines run: one container of it on each agent.
        for agent in lab.agents.values():
            assert [c for c in session_cpus(agent) if c.startswith(f"bai-{name}-")], agent.name
        # The ledger, through the managers that are up, holds it.
        for manager in ("manager2", "manager3"):
            assert ledger_via(managers[manager])["sessions"][name]["state"] == document.READY

        listed = cli("session", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {row["name"]: row for row in json.loads(listed.stdout)}
        assert rows[name]["state"] == "running", rows
        shown = cli("session", "show", name)
        assert shown.returncode == 0, shown.stderr
        assert "main1" in shown.stdout and "sub1" in shown.stdout, shown.stdout
    finally:
        destroyed = cli("session", "destroy", name)
        assert destroyed.returncode == 0, destroyed.stderr
    assert name not in sessions_on(lab)
    assert name not in ledger_via(managers["manager2"])["sessions"]
    code, out = on_agent(
        managers["manager2"],
        "docker",
        "network",
        "ls",
        "-q",
        "--filter",
        f"label={LABEL_SESSION}={name}",
    )
    assert (code, out) == (0, ""), out


def destroy_all(lab, names: list[str]) -> None:
    """One destroy of all of them (a list, at once on their agents: ten destroy processes
    at once would only contend for this machine's CPUs), then nothing of them left."""
    gone = finish_playbook(
        start_playbook("session_destroy.yml", extra_vars={"session_names": names}),
        timeout=600,
    )
    assert gone.rc == 0, gone
    for name in names:
        sweep(lab, name)


def test_ten_creates_at_once_through_three_managers_give_out_no_more_than_offered(lab, managers):
    """Ten creates of 1 CPU each, each through one of the three managers (bai_ledger_host)
    against 2 agents x 4 CPUs: exactly 8 run, 2 are PENDING; no engine runs more CPUs than
    it offers; the ledger holds exactly what the engines run. (Ten, not more: each create
    is an ansible-playbook process, and the race needs only more creates than places.)"""
    names = [f"it-swr{i:02d}" for i in range(10)]
    for name in names:
        sweep(lab, name)
    runs = create_at_once(
        names,
        {"cpu": 1, "mem": "256m"},
        each=lambda i: {"bai_ledger_host": MANAGERS[i % 3]},
        timeout=600,
    )
    try:
        made = [n for n, r in zip(names, runs) if r.rc == 0]
        pending = [n for n, r in zip(names, runs) if r.rc != 0]
        for name, run in zip(names, runs):
            if run.rc != 0:
                assert any("PENDING" in f for f in run.failures), (name, run)
        # The truth is what the engines run.
        for agent in lab.agents.values():
            cpus = session_cpus(agent)
            assert sum(cpus.values()) <= OFFER_CPU + 1e-9, (agent.name, cpus)
        assert sessions_on(lab) == set(made)
        assert (len(made), len(pending)) == (8, 2), (made, pending)
        held = ledger_via(managers["manager3"])["sessions"]
        assert set(held) == set(made), held
        assert all(entry["state"] == document.READY for entry in held.values())
    finally:
        destroy_all(lab, names)
    assert not set(ledger_via(managers["manager"])["sessions"]) & set(names)


def running_sessions(lab, prefix: str) -> dict[str, set[str]]:
    """Session name (PREFIX*) -> the session ids of its running containers, on every
    agent."""
    found: dict[str, set[str]] = {}
    for agent in lab.agents.values():
        fmt = f'{{{{.Label "{LABEL_SESSION}"}}}} {{{{.Label "{LABEL_SESSION_ID}"}}}}'
        code, out = on_agent(agent, "docker", "ps", "--format", fmt)
        assert code == 0, out
        for line in out.splitlines():
            name, sid = line.split()
            if name.startswith(prefix):
                found.setdefault(name, set()).add(sid)
    return found


def test_queued_sessions_start_once_each_from_two_managers_passes(lab, managers):
    """Four queued creates at once, each of more than half an agent's memory, through the
    three managers: two run, two wait in the swarm's ledger. Then destroy what runs, and
    two scheduler passes at the same moment through two different managers - each starts
    a different session, what runs never exceeds the offer, and no session ever starts
    twice (one session id per name, as the engines run it)."""
    names = [f"it-swq{i}" for i in range(4)]
    for name in names:
        sweep(lab, name)
    runs = create_at_once(
        names,
        {"cpu": 2, "mem": "5g"},  # more than half an agent's memory: one session per agent
        each=lambda i: {"bai_ledger_host": MANAGERS[i % 3]},
        timeout=600,
        queue=True,
    )
    seen: dict[str, set[str]] = {}
    try:
        assert all(r.rc == 0 for r in runs), [r.failures for r in runs if r.rc]
        now = running_sessions(lab, "it-swq")
        assert len(now) == 2, now
        assert sorted(ledger_via(managers["manager2"])["queue"]) == sorted(set(names) - set(now))
        seen.update(now)
        gone = finish_playbook(
            start_playbook("session_destroy.yml", extra_vars={"session_names": sorted(now)}),
            timeout=600,
        )
        assert gone.rc == 0, gone
        passes = [
            start_playbook("session_schedule.yml", extra_vars={"bai_ledger_host": host})
            for host in ("manager2", "manager3")
        ]
        done = [finish_playbook(p, timeout=600) for p in passes]
        assert all(r.rc == 0 for r in done), [r.failures for r in done if r.rc]
        now = running_sessions(lab, "it-swq")
        assert len(now) == 2, now
        for agent in lab.agents.values():
            assert sum(session_cpus(agent).values()) <= OFFER_CPU + 1e-9, agent.name
        for name, sid in now.items():
            assert name not in seen, f"{name} started twice"
            assert len(sid) == 1, (name, sid)
            seen[name] = sid
        assert sorted(seen) == sorted(names)
        assert "queue" not in ledger_via(managers["manager"])
    finally:
        destroy_all(lab, names)


def test_a_ledger_of_500_sessions_fits_the_swarm_store(managers):
    """500 sessions of 4 containers each, as the ledger writes them, in one config's
    labels: written through one manager, read back whole through another. (A copy under
    another name, so the live ledger is not touched.)"""
    ledger = document.empty()
    for i in range(500):
        name = f"s{i:03d}-training-job"
        now = 1.7e9 + i
        # The entry reservations.reservation makes of such a create's plan.
        ledger.sessions[name] = document.Reservation.from_dict(
            {
                "name": name,
                "session_id": f"{i:08d}-0000-4000-8000-000000000000",
                "spec_hash": "f" * 64,
                "state": document.CREATING,
                "reserved_at": now,
                "expires_at": now + 960,
                "ready_at": None,
                "kernels": [
                    {
                        "host": f"{'main' if k == 0 else 'sub'}{max(k, 1)}",
                        "agent": f"agent{k + 1:02d}-of-the-cluster",
                        "cpu": 8.0,
                        "mem": 64 * 1024**3,
                        "gpu": 2,
                        "gpu_devices": [2 * k, 2 * k + 1],
                    }
                    for k in range(4)
                ],
            }
        )
    text = document.dumps_compact(ledger)
    size = len(text.encode())
    print(f"ledger of 500 sessions x 4 containers: {size} bytes")
    assert size < store_.MAX_LEDGER_BYTES
    probe = "bai-ledger-size-probe"
    # One label of this size is past what a command line may carry: write it with the
    # engine's API from inside the manager (python3-docker), the text on stdin.
    write = (
        "import sys, docker; api = docker.APIClient(); "
        f"api.create_config({probe!r}, b'size probe', "
        f"labels={{{store_.LEDGER_LABEL!r}: sys.stdin.read()}})"
    )
    on_agent(managers["manager2"], "docker", "config", "rm", probe)
    made = subprocess.run(
        ["docker", "exec", "-i", managers["manager2"].name, "python3", "-c", write],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    try:
        assert made.returncode == 0, made.stderr[-500:]
        code, out = on_agent(managers["manager3"], "docker", "config", "inspect", probe)
        assert code == 0, out[-500:]
        back = json.loads(out)[0]["Spec"]["Labels"][store_.LEDGER_LABEL]
        assert document.loads(back) == ledger
    finally:
        on_agent(managers["manager2"], "docker", "config", "rm", probe)
