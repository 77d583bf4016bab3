"""Topology through bai_session_ledger (steps/reserve.py, steps/schedule.py): the
inventory's ``bai_topology`` of each agent (``agents``' ``topology``) is what placement
reads, for fresh and kept reads alike; a session that asks for a level is placed inside
one domain of it, or queued waiting for topology with what each domain holds; and a pass
starts it only where one domain holds it whole."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.scheduling import queue as q
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.roster import Declared
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.reserve import reserve
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.schedule import (
    scheduled,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    effective_level,
    prefer_note,
    widening,
)
from ansible_collections.bai.cluster.plugins.modules import bai_session_plan
from docker_fake import FakeEngine, run_module
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


def reserve_in(path, spec, **more):
    reads = [fresh_read(cpu=CPUS[n], name=n) for n in RACKS]
    return ledger_step(path, state="reserved", spec=spec, agents=AGENTS, agent_info=reads, **more)


def agents_of(result):
    return {k["agent"] for k in result["kernels"]}


def test_a_gang_that_asks_for_a_rack_is_placed_inside_the_one_that_holds_it(tmp_path):
    placed = reserve_in(tmp_path / "l.json", gang("g1", 3))
    assert not placed.get("failed"), placed
    # Six CPUs: only rack r2 (8) holds them; r1 has 4.
    assert agents_of(placed) == {"a3", "a4"}
    assert placed["spec"]["topology"] == "rack"


def test_one_no_rack_holds_now_is_queued_waiting_for_topology_and_says_why(tmp_path):
    path = tmp_path / "l.json"
    assert not reserve_in(path, gang("g1", 3)).get("failed")
    # r2 has 2 CPUs left, r1 4: the four racks' agents together hold three more members,
    # no one rack does.
    queued = reserve_in(path, gang("g2", 3), queue=True)["queued"]
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
    assert not reserve_in(path, gang("g1", 3)).get("failed")
    spread = reserve_in(path, gang("g2", 3, topology=None))
    assert not spread.get("failed"), spread
    assert {RACKS[a] for a in agents_of(spread)} == {"r1", "r2"}


def test_a_level_no_agent_has_waits_forever_and_is_refused_not_queued(tmp_path):
    refused = reserve_in(tmp_path / "l.json", gang("g1", 2, topology="block"), queue=True)
    assert refused.get("failed") and "no agent in service has a 'block'" in refused["msg"]


def test_the_topology_is_kept_with_each_agent_s_declaration_so_a_change_reads_it_again():
    old = Declared.of(AGENTS[0])
    moved = Declared.of({**AGENTS[0], "topology": {"rack": "r9"}})
    assert old.record() == {"group": "default", "resources": None, "topology": {"rack": "r1"}}
    assert old.record() != moved.record()
    # An agent without a topology keeps the record it had before topologies.
    assert Declared.of({"name": "a9"}).record() == {"group": "default", "resources": None}


# --- preferred: wait so long for one domain, then widen -----------------------------------


def test_a_preferred_gang_waits_for_one_rack_until_its_time_then_spans_racks():
    ledger = document.empty()
    reads = [fresh_read(cpu=CPUS[n], name=n) for n in RACKS]

    def ask(spec, now):
        request = LedgerRequest(spec=spec, agents=AGENTS, agent_info=reads, queue=True)
        return reserve(request, ledger, now)

    assert not ask(gang("g1", 3), 1000.0).get("queued")
    queued = ask({**gang("g2", 3), "topology_prefer_s": 20}, 1000.0)["queued"]
    # Submitted at 1000 by the ledger's clock: it widens (to any agents: the cluster's
    # only level is rack) at 1020, 00:17:00 UTC.
    assert queued["wait"] == "topology" and queued["topology_prefer_s"] == 20, queued
    assert queued["reason"].endswith(
        "; it prefers one rack: it widens to any agents at 00:17:00 UTC"
    )

    def pass_at(now):
        return scheduled(LedgerRequest(state="scheduled", agents=AGENTS), ledger, now, None)

    early = pass_at(1019.0)
    assert early["start"] == [] and early["queue"][0]["reason"] == queued["reason"]
    late = pass_at(1020.0)
    assert [s["name"] for s in late["start"]] == ["g2"], late


def test_a_preferred_request_widens_one_level_per_wait_and_never_narrower_than_asked():
    levels = ("block", "rack")
    assert [effective_level("rack", 20, w, levels) for w in (0, 19, 20, 39, 40, 500)] == [
        "rack", "rack", "block", "block", "", "",
    ]  # fmt: skip
    assert effective_level("block", 20, 30, levels) == ""
    assert effective_level("rack", 0, 500, levels) == "rack"  # required: never widens
    note = prefer_note("rack", 20, 1000.0, 1025.0, levels)
    assert note == "; it preferred one rack, now one block: it widens to any agents at 00:17:20 UTC"
    assert prefer_note("rack", 20, 1000.0, 1045.0, levels).endswith("now placed on any agents")
    assert prefer_note("rack", 0, 1000.0, 1045.0, levels) == ""


def test_the_request_check_refuses_an_unknown_level_and_caps_the_preferred_wait():
    """bai_session_plan, the create's first step: a level the inventory lacks is refused
    before anything is placed; a wait past the cluster's cap is cut to it."""
    base = {"name": "s1", "size": 2, "topology": "rack", "topology_levels": ["block", "rack"]}
    ok = run_module(
        bai_session_plan,
        {**base, "topology_prefer_s": 9000, "topology_max_prefer_s": 600},
        FakeEngine(),
    )
    assert not ok.get("failed") and ok["spec"]["topology_prefer_s"] == 600, ok
    bad = run_module(bai_session_plan, {**base, "topology": "rakc"}, FakeEngine())
    assert bad["failed"] and "this cluster's levels are block, rack" in bad["msg"], bad


def test_a_queued_gang_starting_again_knows_the_agents_of_its_last_attempt():
    entry = QueueEntry.from_dict(
        {
            "name": "g",
            "spec": gang("g", 2),
            "submitted_at": 10.0,
            "head": True,
            "attempts": [
                {"attempt": 0, "members": {"main1": "a9", "sub1": "a9"}},
                {"attempt": 1, "members": {"main1": "a3", "sub1": "a4"}},
            ],
        }
    )
    waiting = q.as_waiting(entry)
    assert waiting.home == ("a3", "a4")
    assert ("topology_home", "a3,a4") in waiting.request.constraints
    assert q.home_of(None) == ()


def test_a_session_that_names_no_level_is_packed_into_the_fullest_rack_that_holds_it(tmp_path):
    """Packing (docs/placement.md, "Topology"): on a cluster with levels, a session with
    no level takes the tightest rack that holds it (r1, 4 CPUs free, before r2's 8), not
    the roomiest agent (a3 or a4): whole racks stay free for gangs. Without a topology
    in the inventory, placement is as it was."""
    single = {"name": "s1", "size": 1, "resources": {"cpu": 1}}
    packed = reserve_in(tmp_path / "a.json", single)
    assert agents_of(packed) == {"a1"}, packed
    plain_agents = [{k: v for k, v in a.items() if k != "topology"} for a in AGENTS]
    reads = [fresh_read(cpu=CPUS[n], name=n) for n in RACKS]
    plain = ledger_step(
        tmp_path / "b.json", state="reserved", spec=single, agents=plain_agents, agent_info=reads
    )
    assert agents_of(plain) == {"a3"}, plain
    # A gang with no level that one rack holds stays in it; one no rack holds spans.
    assert {
        RACKS[a] for a in agents_of(reserve_in(tmp_path / "c.json", gang("g", 2, topology=None)))
    } == {"r1"}
    assert widening("", 0, 0, ("block", "rack")) == ("", ("rack",))
    assert widening("", 0, 0, ()) == ("", ())
