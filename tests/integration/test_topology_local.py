"""Topology-aware placement (docs/placement.md, "Topology") on this machine's engine: two
virtual agents (``bai_agent_id`` slots of one engine, 2 CPUs each), each its own rack by
the inventory's ``bai_topology``. The truth is read from Docker: which agent label each
member's container carries. (A gang across two agents needs a swarm overlay, which this
engine has not: the lab's test_topology_lab.py places gangs across real engines.)

- A session that asks for a rack takes the tightest that holds it: the first one r1
  (the racks tie), and one that names no level is packed the same way, into r1 again
  (the fullest), so r2 stays whole; ``session show`` names each member's rack.
- With one CPU free in each rack, a gang of 2 x 1 CPU that asks for a rack fits across
  them but in no one: queued, it waits for ``topology``, and its reason and ``session
  explain`` say what each rack holds. When a session of r1 is destroyed, that destroy's
  scheduler pass starts it inside r1.
- A level the inventory does not have is refused before anything is made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import bai_cli
from conftest import virtual_agents as make_inventory
from labtools import LABEL_SESSION

pytestmark = pytest.mark.integration

LABEL_AGENT = "ai.backend.cluster.agent"
RACKS = {"ta1": "r1", "ta2": "r2"}
ONE = ("--cpu", "1", "--mem", "64m")  # per container


def racked_inventory(tmp_path: Path) -> Path:
    """make_inventory's two virtual agents, each with its rack."""
    path = make_inventory(tmp_path, tuple(RACKS), cpu=2, mem="1g")
    inventory = yaml.safe_load(path.read_text())
    inventory["all"]["vars"]["bai_topology_levels"] = ["rack"]
    for name, rack in RACKS.items():
        inventory["all"]["children"]["agents"]["hosts"][name]["bai_topology"] = {"rack": rack}
    path.write_text(yaml.safe_dump(inventory))
    return path


def cli(tmp: Path, inventory: Path, *argv: str) -> dict:
    run = bai_cli(tmp, "-i", str(inventory), "--json", *argv)
    assert run.returncode == 0, (argv, run.stdout, run.stderr)
    return json.loads(run.stdout)


def racks_of(docker_client, name: str) -> set[str]:
    """The racks of the agents whose containers run session ``name``."""
    found = docker_client.containers.list(filters={"label": f"{LABEL_SESSION}={name}"})
    return {RACKS[c.labels[LABEL_AGENT]] for c in found}


def test_sessions_that_ask_for_a_rack_pack_it_and_a_gang_waits_for_a_whole_one(
    docker_client, tmp_path
):
    inventory = racked_inventory(tmp_path)
    names = ["it-topo-a", "it-topo-b", "it-topo-c", "it-topo-gang"]
    try:
        made = cli(tmp_path, inventory, "session", "create", names[0], "-n", "1", *ONE,
                   "--topology", "rack")  # fmt: skip
        assert made["action"] == "create", made
        # A session that names no level is packed too: into the fullest rack that holds
        # it, r1, so rack r2 stays whole.
        packed = cli(tmp_path, inventory, "session", "create", names[1], "-n", "1", *ONE)
        assert packed["action"] == "create", packed
        # The first in r1 by name (the racks tie), the second the tightest.
        assert racks_of(docker_client, names[0]) == racks_of(docker_client, names[1]) == {"r1"}
        shown = cli(tmp_path, inventory, "session", "show", names[1])
        assert shown["topology"] == {"ta1": {"rack": "r1"}}, shown["topology"]
        text = bai_cli(tmp_path, "-i", str(inventory), "session", "show", names[1]).stdout
        assert "TOPOLOGY" in text and "rack=r1" in text, text

        # One CPU free in each rack: r1 has too little memory left for this one.
        destroyed = cli(tmp_path, inventory, "session", "destroy", names[1])
        assert destroyed["containers"], destroyed
        big = cli(tmp_path, inventory, "session", "create", names[2], "-n", "1",
                  "--cpu", "1", "--mem", "990m")  # fmt: skip
        assert big["action"] == "create" and racks_of(docker_client, names[2]) == {"r2"}

        gang = cli(
            tmp_path, inventory, "session", "create", names[3], "-n", "2", "--mode",
            "multi-node", "--cpu", "1", "--mem", "32m", "--topology", "rack", "--queue",
        )  # fmt: skip
        waits = gang["pending"]
        assert gang["action"] == "queued" and waits["wait"] == "topology", gang
        assert waits["topology"] == "rack"
        assert waits["reason"].startswith(
            "needs its 2 containers in one rack; room now for 1 in rack r1, 1 in rack r2 ("
        ), waits["reason"]
        explained = bai_cli(tmp_path, "-i", str(inventory), "session", "explain", names[3])
        assert "needs its 2 containers in one rack" in explained.stdout, explained.stdout

        # r1 whole again: the destroy's pass starts the gang there, on one agent.
        done = cli(tmp_path, inventory, "session", "destroy", names[0])
        assert done["schedule"]["started"] == [names[3]], done
        assert racks_of(docker_client, names[3]) == {"r1"}
    finally:
        for name in names:
            bai_cli(tmp_path, "-i", str(inventory), "--quiet", "session", "destroy", name)


def test_a_level_the_inventory_does_not_have_is_refused_before_anything_is_made(
    docker_client, tmp_path
):
    inventory = racked_inventory(tmp_path)
    run = bai_cli(
        tmp_path, "-i", str(inventory), "session", "create", "it-topo-bad", "-n", "2",
        "--topology", "block",
    )  # fmt: skip
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "topology: got 'block'; this cluster's levels are rack" in run.stderr, run.stderr
    assert not docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}=it-topo-bad"}
    )
