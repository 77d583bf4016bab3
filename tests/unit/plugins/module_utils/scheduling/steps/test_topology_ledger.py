"""Topology through bai_session_ledger (steps/reserve.py, steps/schedule.py): the
inventory's ``bai_topology`` of each agent (``agents``' ``topology``) is what placement
reads, for fresh and kept reads alike; a session that asks for a level is placed inside
one domain of it, or queued waiting for topology with what each domain holds; and a pass
starts it only where one domain holds it whole."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.roster import Declared
from ledger_fake import fresh_read
from queue_fake import ledger_step

# Two racks: r1 of two small agents (2 CPUs each), r2 of two bigger ones (4 CPUs each).
RACKS = {"a1": "r1", "a2": "r1", "a3": "r2", "a4": "r2"}
CPUS = {"a1": 2, "a2": 2, "a3": 4, "a4": 4}
AGENTS = [
    {"name": n, "group": "default", "resources": None, "topology": {"rack": r}}
    for n, r in RACKS.items()
]


def gang(name, size, cpu=2, topology="rack"):
    spec = {"name": name, "size": size, "mode": "multi-node", "resources": {"cpu": cpu}}
    return {**spec, "topology": topology} if topology else spec


def reserve(path, spec, **more):
    reads = [fresh_read(cpu=CPUS[n], name=n) for n in RACKS]
    return ledger_step(path, state="reserved", spec=spec, agents=AGENTS, agent_info=reads, **more)


def agents_of(result):
    return {k["agent"] for k in result["kernels"]}


def test_a_gang_that_asks_for_a_rack_is_placed_inside_the_one_that_holds_it(tmp_path):
    placed = reserve(tmp_path / "l.json", gang("g1", 3))
    assert not placed.get("failed"), placed
    # Six CPUs: only rack r2 (8) holds them; r1 has 4.
    assert agents_of(placed) == {"a3", "a4"}
    assert placed["spec"]["topology"] == "rack"


def test_one_no_rack_holds_now_is_queued_waiting_for_topology_and_says_why(tmp_path):
    path = tmp_path / "l.json"
    assert not reserve(path, gang("g1", 3)).get("failed")
    # r2 has 2 CPUs left, r1 4: the four racks' agents together hold three more members,
    # no one rack does.
    queued = reserve(path, gang("g2", 3), queue=True)["queued"]
    assert queued["wait"] == "topology", queued
    assert queued["topology"] == "rack"
    assert queued["reason"].startswith(
        "needs its 3 containers in one rack; room now for 2 in rack r1, 1 in rack r2 ("
    ), queued["reason"]
    # The pass (by the kept reads and the inventory's topology) agrees, and starts nothing.
    passed = ledger_step(path, state="scheduled", agents=AGENTS)
    assert not passed.get("started"), passed
    [waiting] = passed["queue"]
    assert waiting["wait"] == "topology" and waiting["reason"] == queued["reason"]


def test_without_a_level_the_same_gang_spans_racks(tmp_path):
    path = tmp_path / "l.json"
    assert not reserve(path, gang("g1", 3)).get("failed")
    spread = reserve(path, gang("g2", 3, topology=None))
    assert not spread.get("failed"), spread
    assert {RACKS[a] for a in agents_of(spread)} == {"r1", "r2"}


def test_a_level_no_agent_has_waits_forever_and_is_refused_not_queued(tmp_path):
    refused = reserve(tmp_path / "l.json", gang("g1", 2, topology="block"), queue=True)
    assert refused.get("failed") and "no agent in service has a 'block'" in refused["msg"]


def test_the_topology_is_kept_with_each_agent_s_declaration_so_a_change_reads_it_again():
    old = Declared.of(AGENTS[0])
    moved = Declared.of({**AGENTS[0], "topology": {"rack": "r9"}})
    assert old.record() == {"group": "default", "resources": None, "topology": {"rack": "r1"}}
    assert old.record() != moved.record()
    # An agent without a topology keeps the record it had before topologies.
    assert Declared.of({"name": "a9"}).record() == {"group": "default", "resources": None}
