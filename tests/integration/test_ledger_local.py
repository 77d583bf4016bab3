"""Concurrent creates through the session ledger, on this machine's engine
(``inventories/local``, where the ledger host is localhost).

Real ansible-playbook processes started at the same moment, a small declared capacity,
then the truth read from Docker: what the running containers were given never exceeds
what the agent offers, losers are PENDING and leave nothing, one name makes one
session, and a create killed part-way blocks the next one only until its reservation
expires. Each test keeps its own ledger file (``bai_ledger_path``) so it reads exactly
what its own runs reserved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import finish_playbook, start_playbook, virtual_agents
from labtools import LABEL_SESSION

pytestmark = pytest.mark.integration

LOCAL = "inventories/local"
LABEL_CPU = "ai.backend.cluster.cpu"
LABEL_SESSION_ID = "ai.backend.cluster.session-id"


def start(
    name: str, ledger: Path, capacity: dict | None, inventory: str = LOCAL, **variables
) -> subprocess.Popen:
    """Start session_create.yml in the background; CAPACITY overrides every agent's
    bai_agent_resources."""
    extra = {
        "session_name": name,
        "bai_ledger_path": str(ledger),
        **({"bai_agent_resources": capacity} if capacity else {}),
        **{f"session_{k}": v for k, v in variables.items()},
    }
    return start_playbook("session_create.yml", extra_vars=extra, inventory=inventory)


def outcome(proc: subprocess.Popen) -> tuple[int, str]:
    """(rc, the failed tasks' messages joined) of a started run."""
    run = finish_playbook(proc)
    return run.rc, " | ".join(run.failures) or repr(run)


def destroy(run_playbook, name: str | list[str], ledger: Path, inventory: str = LOCAL) -> None:
    """Destroy one session, or a list of them in one run (at once on their agents)."""
    which = {"session_names": name} if isinstance(name, list) else {"session_name": name}
    run = run_playbook(
        "session_destroy.yml",
        extra_vars={**which, "bai_ledger_path": str(ledger)},
        inventory=inventory,
    )
    assert run.rc == 0, run


def read_ledger(ledger: Path) -> dict:
    return json.loads(ledger.read_text())["sessions"] if ledger.exists() else {}


def running_cpu(docker_client, prefix: str) -> float:
    """CPUs the running session containers of sessions named PREFIX* were given (labels),
    cross-checked with Docker's own limit (NanoCpus)."""
    total = 0.0
    for c in docker_client.containers.list(filters={"label": LABEL_SESSION}):
        if not c.labels[LABEL_SESSION].startswith(prefix):
            continue
        given = float(c.labels[LABEL_CPU])
        assert c.attrs["HostConfig"]["NanoCpus"] == int(given * 1e9), c.name
        total += given
    return total


def containers_of(docker_client, name: str) -> list:
    return docker_client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={name}"})


@pytest.fixture
def ledger(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ledger") / "ledger.json"


def test_concurrent_creates_never_exceed_the_capacity(run_playbook, docker_client, ledger):
    """Six creates at once, each 2 containers x 1 CPU, on an agent that offers 4 CPUs:
    two fit. Without the ledger all six read an idle agent and all six were placed."""
    capacity = {"cpu": 4, "mem": "8g", "gpu": 0}
    names = [f"it-race{i}" for i in range(6)]
    procs = {
        name: start(name, ledger, capacity, size=2, resources={"cpu": 1, "mem": "256m"})
        for name in names
    }
    results = {name: outcome(proc) for name, proc in procs.items()}
    try:
        won = sorted(name for name, (rc, _msg) in results.items() if rc == 0)
        lost = {name: msg for name, (rc, msg) in results.items() if rc != 0}
        assert len(won) == 2, results
        for name, msg in lost.items():
            assert "PENDING" in msg, (name, msg)
            assert containers_of(docker_client, name) == [], f"{name} left containers"
        assert running_cpu(docker_client, "it-race") == 4.0
        for name in won:
            assert len(containers_of(docker_client, name)) == 2
        entries = read_ledger(ledger)
        assert sorted(entries) == won, entries  # losers reserved nothing that stayed
        assert all(e["state"] == "ready" for e in entries.values())
    finally:
        destroy(run_playbook, names, ledger)
    assert read_ledger(ledger) == {}


def test_two_creates_of_one_name_make_one_session(run_playbook, docker_client, ledger):
    capacity = {"cpu": 16, "mem": "32g", "gpu": 0}
    procs = [start("it-same", ledger, capacity, size=2) for _attempt in range(3)]
    results = [outcome(proc) for proc in procs]
    try:
        assert any(rc == 0 for rc, _msg in results), results
        for rc, msg in results:
            if rc != 0:
                assert "being created by another run" in msg or "run again" in msg, msg
        found = containers_of(docker_client, "it-same")
        assert len(found) == 2, [c.name for c in found]
        assert len({c.labels[LABEL_SESSION_ID] for c in found}) == 1
        entry = read_ledger(ledger)["it-same"]
        assert entry["state"] == "ready"
        assert entry["session_id"] == found[0].labels[LABEL_SESSION_ID]
    finally:
        destroy(run_playbook, "it-same", ledger)


def test_a_killed_create_blocks_only_until_its_reservation_expires(
    run_playbook, docker_client, ledger
):
    """A create killed right after it reserved: its reservation keeps the next create of
    the same capacity PENDING until the TTL runs out, then that create goes through."""
    capacity = {"cpu": 2, "mem": "8g", "gpu": 0}
    ttl = 20
    dying = start("it-dies", ledger, capacity, size=2, reservation_ttl_s=ttl)
    deadline = time.monotonic() + 120
    while "it-dies" not in read_ledger(ledger):
        assert dying.poll() is None, outcome(dying)
        assert time.monotonic() < deadline, "the create never reserved"
        time.sleep(0.05)
    os.killpg(dying.pid, signal.SIGKILL)
    killed_at = time.time()
    dying.communicate()
    reserved = read_ledger(ledger)["it-dies"]
    assert reserved["state"] == "creating"
    for c in containers_of(docker_client, "it-dies"):  # what it made before it died
        c.remove(force=True)
    try:
        rc, msg = outcome(start("it-next", ledger, capacity, size=2))
        assert rc != 0 and "PENDING" in msg, msg
        assert containers_of(docker_client, "it-next") == []
        rc, msg = outcome(start("it-next", ledger, capacity, size=2, wait_s=120, wait_delay_s=2))
        assert rc == 0, msg
        assert time.time() >= reserved["expires_at"] - 1  # not before the expiry
        assert time.time() - killed_at < ttl + 60  # and not much after
        assert sorted(read_ledger(ledger)) == ["it-next"]  # the dead run's entry is gone
    finally:
        destroy(run_playbook, "it-next", ledger)
        destroy(run_playbook, "it-dies", ledger)


def test_four_virtual_agents_on_one_engine_each_count_their_own(
    run_playbook, docker_client, ledger, tmp_path
):
    """Four inventory agents that share this machine's engine ("virtual agents", how
    scale is measured here), 2 CPUs each, and five creates of 2 x 1 CPU at once: each
    agent takes one session, the fifth is PENDING. Were the agents to count every
    container on the engine, the second create would already find all of them full."""
    agents = [f"va{i}" for i in range(1, 5)]
    inventory = virtual_agents(tmp_path, tuple(agents), cpu=2, mem="4g")
    names = [f"it-va{i}" for i in range(5)]
    procs = {
        name: start(name, ledger, None, str(inventory), size=2, resources={"cpu": 1, "mem": "256m"})
        for name in names
    }
    results = {name: outcome(proc) for name, proc in procs.items()}
    try:
        won = [name for name, (rc, _msg) in results.items() if rc == 0]
        assert len(won) == 4, results
        lost = [msg for rc, msg in results.values() if rc != 0]
        assert "PENDING" in lost[0], lost
        placed = {}
        for name in won:
            found = containers_of(docker_client, name)
            assert len(found) == 2
            placed[name] = {c.labels["ai.backend.cluster.agent"] for c in found}
        assert all(len(where) == 1 for where in placed.values()), placed
        assert sorted(a for where in placed.values() for a in where) == agents
    finally:
        destroy(run_playbook, names, ledger, str(inventory))
    assert read_ledger(ledger) == {}
