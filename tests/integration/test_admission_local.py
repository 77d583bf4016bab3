"""Admission on the agent, on this machine's engine (``inventories/local`` and inventories
made here that name the same engine): whatever the session ledger gets wrong, the agent
refuses what does not fit beside every session container it has, in any state.

Each test reproduces one way the ledger alone handed out more than an agent offers (a
create whose reservation was dropped while its containers ran, a create that outlived
its reservation, a stopped session whose share was read as free, two inventory names and
two ledgers for one engine), then asserts on what the engine has: the CPUs
(``HostConfig.NanoCpus``) and memory (``HostConfig.Memory``) of the session containers
that exist on it, in any state, never exceed what the agent offers.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, VENV_BIN, PlaybookRun, ansible_playbook
from labtools import LABEL_SESSION
from test_ledger_local import containers_of, destroy, outcome, read_ledger, start

pytestmark = pytest.mark.integration

LABEL_AGENT_ID = "ai.backend.cluster.agent-id"
GI = 1024**3
CAPACITY = {"cpu": 3, "mem": "4g", "gpu": 0}


def held_by_engine(docker_client) -> tuple[float, int]:
    """(CPUs, bytes) that the session containers of this engine's whole-engine agent, in
    any state, were given by Docker itself (virtual agents' slots are not counted)."""
    cpu, mem = 0.0, 0
    for c in docker_client.containers.list(all=True, filters={"label": LABEL_SESSION}):
        if "/" in c.labels.get(LABEL_AGENT_ID, ""):
            continue
        cpu += c.attrs["HostConfig"]["NanoCpus"] / 1e9
        mem += c.attrs["HostConfig"]["Memory"]
    return round(cpu, 6), mem


def assert_within(docker_client, capacity: dict) -> None:
    cpu, mem = held_by_engine(docker_client)
    assert cpu <= capacity["cpu"], f"the engine holds {cpu} CPUs of {capacity['cpu']}"
    assert mem <= int(capacity["mem"].rstrip("g")) * GI, f"the engine holds {mem} bytes"


def ledger_module(ledger: Path, **args) -> dict:
    """One bai_session_ledger call on localhost, as an operator (or an expiry) would make it."""
    import subprocess

    argv = [
        str(VENV_BIN / "ansible"),
        "localhost",
        "-i",
        "inventories/local",
        "-m",
        "bai.cluster.bai_session_ledger",
        "-a",
        json.dumps({"path": str(ledger), **args}),
        "-o",
    ]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.split("=>", 1)[1])


@pytest.fixture
def ledger(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ledger") / "ledger.json"


@pytest.fixture
def clean(run_playbook, ledger):
    """Names to destroy after the test, whatever happened."""
    names: list[str] = []
    yield names
    if names:
        destroy(run_playbook, names, ledger)


def test_a_session_the_ledger_lost_still_holds_its_share(docker_client, ledger, clean):
    """Case 1: the ledger drops a reservation while its containers run (an expiry that did
    not look at the agents). The next create, placed by the ledger on top, is refused by
    the agent, which names what it offers and what holds it; nothing of it is left."""
    clean += ["it-adm-lost", "it-adm-next"]
    rc, msg = outcome(start("it-adm-lost", ledger, CAPACITY, size=2))
    assert rc == 0, msg
    sid = read_ledger(ledger)["it-adm-lost"]["session_id"]
    ledger_module(ledger, state="absent", name="it-adm-lost", session_id=sid)
    assert "it-adm-lost" not in read_ledger(ledger)

    rc, msg = outcome(start("it-adm-next", ledger, CAPACITY, size=2))
    assert rc != 0, msg
    assert "refuses session it-adm-next" in msg, msg
    assert "it offers cpu 3, mem 4g" in msg and "it-adm-lost: 2 container(s), running" in msg, msg
    assert "short of cpu (free 1)" in msg, msg
    assert containers_of(docker_client, "it-adm-next") == []
    assert "it-adm-next" not in read_ledger(ledger)  # the failed create released its own
    assert_within(docker_client, CAPACITY)


def test_a_create_that_outlives_its_reservation_fails_and_removes_what_it_made(
    docker_client, ledger, clean
):
    """Case 2: a controller paused (SIGSTOP) right after it reserved, past its
    reservation's TTL (1 s). Meanwhile a reconcile reads the agent, finds nothing of the
    session and drops the reservation. Resumed, the create makes its containers (the
    agent admits them: they fit), finds its reservation gone at the confirm, fails and
    removes them instead of reporting a session the ledger does not count."""
    clean.append("it-adm-late")
    proc = start("it-adm-late", ledger, CAPACITY, size=2, reservation_ttl_s=1)
    deadline = time.monotonic() + 120
    while "it-adm-late" not in read_ledger(ledger):
        assert proc.poll() is None, outcome(proc)
        assert time.monotonic() < deadline, "the create never reserved"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        assert containers_of(docker_client, "it-adm-late") == [], "paused too late"
        time.sleep(2)
        run = ansible_playbook(
            "session_reconcile.yml",
            extra_vars={"bai_ledger_path": str(ledger), "bai_agent_resources": CAPACITY},
            inventory="inventories/local",
        )
        assert run.rc == 0, run
        assert run.stats["bai_reconcile"]["dropped"] == ["it-adm-late"], run.stats
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
    rc, msg = outcome(proc)
    assert rc != 0, msg
    assert "reservation is gone" in msg and "everything made for it was removed" in msg, msg
    assert containers_of(docker_client, "it-adm-late") == []
    assert read_ledger(ledger) == {}


def test_a_stopped_session_holds_its_share_until_it_is_destroyed(docker_client, ledger, clean):
    """Case 3: both containers of a session stopped by hand. Another create does not get
    their CPUs (PENDING, by the agents' reads); the rerun of the stopped session's create
    is admitted and starts them again."""
    clean += ["it-adm-stopped", "it-adm-other"]
    rc, msg = outcome(start("it-adm-stopped", ledger, CAPACITY, size=2))
    assert rc == 0, msg
    for c in containers_of(docker_client, "it-adm-stopped"):
        c.stop(timeout=1)
    # Past the ledger's margin for reads that may predate a session (STALE_MARGIN_S, 5 s):
    # from now on a fresh read of the agent is what counts the stopped session.
    time.sleep(6)
    rc, msg = outcome(start("it-adm-other", ledger, CAPACITY, size=2))
    assert rc != 0 and "PENDING" in msg, msg
    assert containers_of(docker_client, "it-adm-other") == []
    rc, msg = outcome(start("it-adm-stopped", ledger, CAPACITY, size=2))
    assert rc == 0, msg
    found = containers_of(docker_client, "it-adm-stopped")
    assert sorted(c.status for c in found) == ["running", "running"]
    assert_within(docker_client, CAPACITY)


def test_two_inventories_that_name_one_engine_differently_share_its_offer(docker_client, tmp_path):
    """Cases 4 and 5: two operators, each with an inventory that calls this machine by
    another name and keeps its own ledger, create at the same moment. The engine is one
    agent with one offer (2 CPUs): exactly one create gets it, the other is PENDING (it
    read the engine after the winner made its containers) or refused by the agent's
    admission (it read before), and leaves nothing."""
    capacity = {"cpu": 2, "mem": "4g", "gpu": 0}
    runs = {}
    for n, host in enumerate(("agentx", "10.20.3.11")):
        inventory = this_engine_as(host, tmp_path / f"inventory{n}.yml", capacity)
        own = tmp_path / f"ledger{n}.json"
        name = f"it-adm-two{n}"
        runs[name] = (start(name, own, None, inventory, size=2), own, inventory)
    results = {name: outcome(proc) for name, (proc, _own, _inv) in runs.items()}
    try:
        won = [name for name, (rc, _msg) in results.items() if rc == 0]
        assert len(won) == 1, results
        (lost,) = (msg for rc, msg in results.values() if rc != 0)
        # PENDING or refused by the agent when it read the engine after the winner made
        # its containers; refused by its own new ledger when it read them before
        # (sessions that ledger does not know run there: another ledger serves them).
        assert "PENDING" in lost or "refuses session" in lost or "does not exist yet" in lost, lost
        assert len(containers_of(docker_client, won[0])) == 2
        assert_within(docker_client, capacity)
    finally:
        for name, (_proc, own, inv) in runs.items():
            destroy_with(name, own, inv)


def this_engine_as(host: str, path: Path, capacity: dict) -> str:
    """An inventory whose one agent, called HOST, is this machine's engine."""
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "bai_agent_resources": capacity,
    }
    agents = {"hosts": {host: {}}, "vars": local}
    path.write_text(yaml.safe_dump({"all": {"children": {"agents": agents}}}))
    return str(path)


def destroy_with(name: str, ledger: Path, inventory: str, ok: bool = True) -> PlaybookRun:
    run = ansible_playbook(
        "session_destroy.yml",
        extra_vars={"session_name": name, "bai_ledger_path": str(ledger)},
        inventory=inventory,
    )
    assert run.rc == 0 or not ok, run
    return run


# --- Destroy ------------------------------------------------------------------------------
def test_a_destroy_through_an_inventory_that_lacks_the_agent_releases_nothing(
    docker_client, ledger, tmp_path
):
    """Case 9: the session was made through an inventory that calls this machine agentx;
    a destroy through one that calls it agenty reaches no agent of the session. It fails
    naming agentx, and the reservation stays as long as the containers run; the destroy
    through the first inventory then removes both."""
    capacity = {"cpu": 2, "mem": "4g", "gpu": 0}
    made_by = this_engine_as("agentx", tmp_path / "x.yml", capacity)
    other = this_engine_as("agenty", tmp_path / "y.yml", capacity)
    rc, msg = outcome(start("it-adm-where", ledger, None, made_by, size=2))
    try:
        assert rc == 0, msg
        run = destroy_with("it-adm-where", ledger, other, ok=False)
        text = " ".join(run.failures)
        assert run.rc != 0 and "says agent(s) agentx hold it" in text, run
        assert "reservation is kept" in text, text
        assert len(containers_of(docker_client, "it-adm-where")) == 2
        assert "it-adm-where" in read_ledger(ledger)
    finally:
        destroy_with("it-adm-where", ledger, made_by)
    assert containers_of(docker_client, "it-adm-where") == []
    assert read_ledger(ledger) == {}


def test_a_release_by_an_older_session_id_leaves_a_newer_reservation(ledger):
    """Case 9, the race: a destroy read session s's id, then a create of the same name
    reserved anew before the destroy released. The release, by the id it read, leaves the
    new reservation alone (the ledger module as session_destroy.yml calls it)."""
    entry = {
        "name": "it-adm-race",
        "session_id": "new-id",
        "spec_hash": "h",
        "state": "creating",
        "reserved_at": time.time(),
        "expires_at": time.time() + 600,
        "ready_at": None,
        "kernels": [
            {"host": "main1", "agent": "a1", "cpu": 1.0, "mem": GI, "gpu": 0, "gpu_devices": []}
        ],
    }
    ledger.write_text(json.dumps({"version": 1, "sessions": {"it-adm-race": entry}, "agents": {}}))
    result = ledger_module(ledger, state="absent", name="it-adm-race", session_id="old-id")
    assert result["changed"] is False
    assert read_ledger(ledger)["it-adm-race"]["session_id"] == "new-id"
