"""Placement without reading every agent, on this machine's engine (docs/placement.md,
"Reading only the agents a create must"): virtual agents (``bai_agent_id`` slots of one
engine, each with a declared capacity) and a ledger file per test.

What is asserted is what the engine runs (containers, their agent slot and labels) and
which agents the create's play read (the hosts of its "Read capacity" task).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import docker
import pytest
import yaml
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT_ID,
    LABEL_CPU,
    LABEL_GPU,
    LABEL_MEM,
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    engine_identity,
)
from conftest import ansible_playbook

pytestmark = pytest.mark.integration

READ_TASK = "Read capacity and this session's containers on this agent"


def inventory(folder: Path, agents: dict[str, dict]) -> str:
    """Virtual agents on this engine (name -> bai_agent_resources), one ledger file."""
    path = folder / "inventory.yml"
    hosts = {
        name: {"bai_agent_id": name, "bai_agent_resources": res} for name, res in agents.items()
    }
    group = {
        "hosts": hosts,
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        },
    }
    ledger = {"bai_ledger_path": str(folder / "ledger.json")}
    path.write_text(yaml.safe_dump({"all": {"vars": ledger, "children": {"agents": group}}}))
    return str(path)


def read_hosts(run) -> list[list[str]]:
    """The agents each "Read capacity" task of the run read, in order (empty rounds too)."""
    rounds = []
    for play in run.result.get("plays", []):
        for task in play.get("tasks", []):
            if task["task"]["name"] == READ_TASK:
                rounds.append(sorted(h for h, r in task["hosts"].items() if not r.get("skipped")))
    return rounds


def slots(client, name: str) -> dict[str, str]:
    """Container name -> agent slot, for session ``name`` on this engine."""
    found = client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={name}"})
    return {c.name: c.labels[LABEL_AGENT_ID].rsplit("/", 1)[-1] for c in found}


@pytest.fixture
def cluster(tmp_path):
    """(inventory, sessions to destroy afterwards)."""
    made: list[str] = []
    agents = {f"pl{i}": {"cpu": 2, "mem": "2g", "gpu": 0} for i in range(1, 13)}
    agents["pl1"] = {"cpu": 8, "mem": "8g", "gpu": 0}  # the roomiest: placed there first
    inv = inventory(tmp_path, agents)
    # The ledger exists (a create on a ledger that does not exist yet reads every agent).
    run = ansible_playbook("session_reconcile.yml", inventory=inv)
    assert run.rc == 0, run
    yield inv, made
    for name in made:
        run = ansible_playbook(
            "session_destroy.yml", extra_vars={"session_name": name}, inventory=inv
        )
        assert run.rc == 0, run


def create(inv: str, name: str, cpu: float):
    return ansible_playbook(
        "session_create.yml",
        extra_vars={
            "session_name": name,
            "session_size": 1,
            "session_resources": {"cpu": cpu, "mem": "256m"},
        },
        inventory=inv,
    )


def test_a_create_over_twelve_agents_reads_only_the_agent_it_places_on(cluster, docker_client):
    inv, made = cluster
    made.append("it-pl-one")
    run = create(inv, "it-pl-one", 1)
    assert run.rc == 0, run
    # Placed by the declarations (pl1 offers the most), then only pl1 was read.
    assert [r for r in read_hosts(run) if r] == [["pl1"]]
    assert set(slots(docker_client, "it-pl-one").values()) == {"pl1"}
    # The second create finds pl1's read recent: it reads no agent at all.
    made.append("it-pl-two")
    run = create(inv, "it-pl-two", 1)
    assert run.rc == 0, run
    assert [r for r in read_hosts(run) if r] == []
    assert set(slots(docker_client, "it-pl-two").values()) == {"pl1"}


def test_an_agent_that_refuses_is_read_and_the_session_placed_elsewhere(cluster, docker_client):
    """pl1's kept read is recent, but something took its CPUs behind the ledger's back (a
    session container of its slot, made by hand): pl1's admission refuses the next
    create, which undoes its try, reads pl1, and places the session on another agent."""
    inv, made = cluster
    made.append("it-pl-first")
    assert create(inv, "it-pl-first", 1).rc == 0  # pl1 is read and kept
    engine = engine_identity(docker_client.info())
    squatter = docker_client.containers.create(
        "bai/session:latest",
        ["sleep", "infinity"],
        name="it-pl-squatter",
        labels={
            LABEL_SESSION: "it-pl-squatter",
            LABEL_SESSION_ID: "by-hand",
            LABEL_CPU: "6.5",
            LABEL_MEM: str(256 * 2**20),
            LABEL_GPU: "0",
            LABEL_AGENT_ID: f"{engine}/pl1",
        },
    )
    try:
        made.append("it-pl-moved")
        run = create(inv, "it-pl-moved", 1)
        assert run.rc == 0, run
        rounds = [r for r in read_hosts(run) if r]
        # No read before the first try (pl1's kept read); after the refusal, pl1 is read,
        # then the agent the session moved to.
        assert rounds[0] == ["pl1"] and len(rounds) == 2 and rounds[1] != ["pl1"], rounds
        (where,) = set(slots(docker_client, "it-pl-moved").values())
        assert where != "pl1" and [where] == rounds[1]
        # What pl1's engine slot holds stays within its 8 CPUs.
        on_pl1 = [
            float(c.labels[LABEL_CPU])
            for c in docker_client.containers.list(all=True, filters={"label": LABEL_SESSION})
            if c.labels.get(LABEL_AGENT_ID, "").endswith("/pl1")
        ]
        assert sum(on_pl1) <= 8.0, on_pl1
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            squatter.remove(force=True)
