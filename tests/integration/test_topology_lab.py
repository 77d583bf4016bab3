"""Topology-aware placement across the lab's two real agents (docs/placement.md,
"Topology"): the lab's inventory, copied, with two levels, ``block`` and ``rack``:
agent1 in block b1, rack r1; agent2 in block b1, rack r2. Each agent offers 4 CPUs, so a
gang of 3 x 2 CPUs fits in block b1 (across both engines, on a swarm overlay) and in no
rack. The truth is read from the agents' engines: where each member's container runs.

- Asking for one rack, required: PENDING (exit 3), saying what each rack holds; nothing
  is made.
- Asking for one rack, preferred for 20 s, queued: it waits for topology and says when it
  widens; a scheduler pass before then starts nothing, the first one after places it by
  the block, across both agents (an overlay), and ``session show`` gives each member's
  block and rack.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, bai_cli
from labtools import LABEL_SESSION, on_agent, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

WHERE = {"agent1": {"block": "b1", "rack": "r1"}, "agent2": {"block": "b1", "rack": "r2"}}
GANG = ("-n", "3", "--mode", "multi-node", "--cpu", "2", "--mem", "128m")
NAMES = ("it-topo-rack", "it-topo-pref")


@pytest.fixture(scope="module")
def inventory(tmp_path_factory, lab) -> Path:
    """The lab's inventory with the topology: the levels in all.yml, each agent's domains
    in its host_vars."""
    lab["agent1"]  # skips when the lab is not up
    folder = tmp_path_factory.mktemp("topology") / "lab"
    shutil.copytree(REPO / "inventories" / "lab", folder)
    with (folder / "group_vars" / "all.yml").open("a") as handle:
        handle.write("\nbai_topology_levels: [block, rack]\n")
    (folder / "host_vars").mkdir(exist_ok=True)
    for agent, domains in WHERE.items():
        (folder / "host_vars" / f"{agent}.yml").write_text(
            yaml.safe_dump({"bai_topology": domains})
        )
    yield folder
    for name in NAMES:
        bai_cli(None, "-i", str(folder), "--quiet", "session", "destroy", name)
        sweep(lab, name)


def cli(inventory: Path, *argv: str) -> dict:
    run = bai_cli(None, "-i", str(inventory), "--json", *argv)
    assert run.returncode == 0, (argv, run.stdout, run.stderr)
    return json.loads(run.stdout)


def agents_running(lab, name: str) -> set[str]:
    found = set()
    for agent, node in lab.agents.items():
        _code, ids = on_agent(
            node, "docker", "ps", "-q", "--filter", f"label={LABEL_SESSION}={name}"
        )
        if ids:
            found.add(agent)
    return found


def test_a_gang_no_rack_holds_is_pending_and_says_what_each_rack_holds(lab, inventory):
    run = bai_cli(None, "-i", str(inventory), "session", "create", NAMES[0], *GANG,
                  "--topology", "rack")  # fmt: skip
    assert run.returncode == 3, (run.stdout, run.stderr)
    assert "needs its 3 containers in one rack; room now for 2 in rack r1, 2 in rack r2" in (
        run.stderr
    ), run.stderr
    assert agents_running(lab, NAMES[0]) == set()


def test_a_preferred_rack_widens_to_the_block_after_its_wait(lab, inventory):
    prefer = 20
    queued = cli(
        inventory, "session", "create", NAMES[1], *GANG, "--topology", "rack",
        "--prefer", str(prefer), "--queue",
    )  # fmt: skip
    submitted = time.monotonic()
    waits = queued["pending"]
    assert queued["action"] == "queued" and waits["wait"] == "topology", queued
    assert "it prefers one rack: it widens to one block at " in waits["reason"], waits
    early = cli(inventory, "session", "schedule")
    assert early["started"] == [] and agents_running(lab, NAMES[1]) == set(), early
    time.sleep(max(prefer - (time.monotonic() - submitted) + 2, 0))
    late = cli(inventory, "session", "schedule")
    assert late["started"] == [NAMES[1]], late
    # Placed by the block: across both agents of b1, on an overlay.
    assert agents_running(lab, NAMES[1]) == {"agent1", "agent2"}
    shown = cli(inventory, "session", "show", NAMES[1])
    assert shown["mode"] == "multi-node" and shown["state"] == "running", shown
    assert {a: shown["topology"][a] for a in ("agent1", "agent2")} == WHERE
    cli(inventory, "session", "destroy", NAMES[1])
