"""The agents' kept reads (module_utils/scheduling/ledger/kept_reads.py): what lets a create read
only the agents it must, and the property that placing by them never overcommits."""

import contextlib
from dataclasses import replace

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    kept_reads,
    reservations,
    roster,
    usage,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_state import (
    AgentState,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.roster import Declared
from hypothesis import settings
from ledger_fake import (
    GI,
    assert_within_offer,
    clusters_and_requests,
    dead_create,
    info,
    offered_reads,
    place,
    place_request,
    reads_of,
)

AGENTS = [Declared("a1", "default", {"cpu": 8})]


def by_name(agents):
    """The inventory's agents by name, as a create keeps their declarations."""
    return {agent.name: agent for agent in agents}


FULL = {"cpu": 4, "mem": "8g", "gpu": 0}  # every number a hint needs


def test_a_kept_read_counts_every_reserved_session_even_one_it_saw_stopped():
    """A live read lets a stopped session's share go; a kept one never does, since the
    session may have been started again since: kept reads only ever say yes."""
    ledger = document.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger.sessions["s1"].session_id
    reservations.mark_ready(ledger, "s1", sid, 1000.0)
    stopped = {
        sid: {"name": "s1", "cpu": 0.0, "mem": 0, "gpu": 0, "gpu_devices": [], "containers": 2}
    }
    settled = info("a1", cpu=8, sessions=stopped, read_at=1000.0 + document.STALE_MARGIN_S)
    assert usage.adjust(reads_of([settled]), ledger)[0].agent.used_cpu == 0.0
    kept_reads.remember(ledger, reads_of([settled]), 1010.0, by_name(AGENTS))
    kept = kept_reads.kept_result(ledger.agents["a1"])
    assert kept.kept and kept.containers == ()
    assert usage.adjust(reads_of([kept]), ledger)[0].agent.used_cpu == 4.0


def test_destroy_frees_what_kept_reads_saw_the_session_use():
    ledger = document.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger.sessions["s1"].session_id
    running = {
        sid: {"name": "s1", "cpu": 4.0, "mem": 0, "gpu": 1, "gpu_devices": [1], "containers": 2}
    }
    read = info("a1", cpu=8, gpus=(0, 1), sessions=running, used=(4.0, 0, 1))
    kept_reads.remember(ledger, reads_of([read]), 1000.0)
    assert ledger.agents["a1"].agent.gpu_in_use == [1]
    assert reservations.release(ledger, "s1", sid)
    record = ledger.agents["a1"]
    assert record.sessions == {}
    assert record.agent.used_cpu == 0.0 and record.agent.used_gpu == 0
    assert record.agent.gpu_in_use == []
    kept = usage.adjust(reads_of([kept_reads.kept_result(record)]), ledger)[0].agent
    assert kept.used_cpu == 0.0


def test_remember_keeps_what_an_older_read_knew_of_images_and_paths():
    ledger = document.empty()
    first = {
        **info("a1"),
        "images": {"img:1": {"present": True, "env": ["A=1"]}},
        "paths": {"/d": True},
    }
    kept_reads.remember(ledger, reads_of([first]), 1000.0)
    second = {**info("a1"), "images": {"img:2": {"present": False}}, "paths": {}}
    kept_reads.remember(ledger, reads_of([second]), 1001.0)
    record = ledger.agents["a1"]
    assert record.images == {"img:1": {"present": True}, "img:2": {"present": False}}
    assert record.paths == {"/d": True}
    assert record.stored_at == 1001.0
    # kept results are not reads
    kept_reads.remember(ledger, reads_of([kept_reads.kept_result(record)]), 1002.0)
    assert ledger.agents["a1"].stored_at == 1001.0


@pytest.mark.parametrize(
    ("why", "change", "expected"),
    [
        ("recent, knows the image and path", {}, "kept"),
        ("no kept read, no full declaration", {"drop": True}, "read"),
        ("no kept read, declared with gpu 0", {"drop": True, "resources": FULL}, "hinted"),
        ("older than max_age: its capacity is a hint", {"now": 1000.0 + 301}, "hinted"),
        ("another image", {"images": ["img:2"]}, "hinted"),
        ("another mount source", {"paths": ["/e"]}, "hinted"),
        ("declared capacity changed", {"resources": {"cpu": 4}}, "read"),
        ("declaration changed to a full one", {"resources": FULL}, "hinted"),
        ("another resource group", {"group": "gpu"}, "read"),
        ("read by this run already", {"drop": True, "fresh": {"a1"}}, None),
    ],
)
def test_sources_say_how_a_create_knows_each_agent(why, change, expected):
    ledger = document.empty()
    read = {**info("a1"), "images": {"img:1": {"present": True}}, "paths": {"/d": False}}
    kept_reads.remember(ledger, reads_of([read]), 1000.0, by_name(AGENTS))
    if change.get("drop"):
        ledger.agents.clear()
    agents = [
        replace(
            AGENTS[0],
            group=change.get("group", "default"),
            resources=change.get("resources", AGENTS[0].resources),
        )
    ]
    found = kept_reads.sources(
        ledger,
        agents,
        name="s1",
        images=change.get("images", ["img:1"]),
        paths=change.get("paths", ["/d"]),
        fresh=change.get("fresh", set()),
        now=change.get("now", 1000.0 + 300),
        max_age=300,
    )
    where = {"read": found.read, "kept": found.kept, "hinted": list(found.hinted)}
    assert {k: v for k, v in where.items() if v} == ({expected: ["a1"]} if expected else {}), why


def test_a_hint_is_the_declared_capacity_with_the_ledger_s_sessions_as_its_load():
    ledger = document.empty()
    place(ledger, "s1", [info("a1", cpu=4, mem_g=8)], size=2, resources={"cpu": 1, "mem": "1g"})
    declared = Declared("a1", "default", FULL)
    hint = kept_reads.hint(declared)
    assert hint is not None and hint.hint and hint.kept
    assert (hint.agent.cpu, hint.agent.mem, hint.agent.gpu_devices) == (
        4.0,
        8 * GI,
        [],
    )
    # Its load is what the ledger gave out there, whatever the agent last showed.
    (counted,) = usage.adjust(reads_of([hint]), ledger)
    assert (counted.agent.used_cpu, counted.agent.used_mem) == (2.0, 2 * GI)
    # GPU devices are detected on the agent: without gpu: 0 (or an earlier read) no hint.
    assert kept_reads.hint(replace(declared, resources={"cpu": 4, "mem": "8g"})) is None
    # An earlier read gives what the declaration does not; the node list gives CPU, memory.
    record = document.KeptRead(
        agent=AgentState.from_dict({"cpu": 2, "mem": GI, "gpu_devices": [0, 1], "id": "n1"})
    )
    from_read = kept_reads.hint(replace(declared, resources=None), record)
    assert from_read is not None and from_read.agent.gpu_devices == [0, 1]
    node = roster.SwarmNode("n1", "a1", "ready", "active", True, cpu=6.0, mem=3 * GI)
    from_node = kept_reads.hint(replace(declared, resources={"gpu": 0}), None, node)
    assert from_node is not None and from_node.agent.cpu == 6.0


def test_a_missing_ledger_places_by_no_hint():
    """A ledger that is missing is never read as empty: every agent is read first."""
    agents = [Declared(a, "default", FULL) for a in ("a1", "a2")]
    args = {"name": "s", "images": [], "paths": [], "fresh": set(), "now": 0.0, "max_age": 300}
    assert sorted(kept_reads.sources(document.empty(), agents, **args).hinted) == ["a1", "a2"]
    assert kept_reads.sources(document.empty(), agents, hints=False, **args).read == ["a1", "a2"]


NODES = [
    {
        "ID": "n1",
        "Description": {"Hostname": "a1", "Resources": {"NanoCPUs": 4e9, "MemoryBytes": GI}},
        "Status": {"State": "ready"},
        "Spec": {"Availability": "active"},
    },
    {
        "ID": "n2",
        "Description": {"Hostname": "a2", "Resources": {"NanoCPUs": 4e9, "MemoryBytes": GI}},
        "Status": {"State": "ready"},
        "Spec": {"Availability": "drain"},
    },
    {
        "ID": "n3",
        "Description": {"Hostname": "a3", "Resources": {}},
        "Status": {"State": "down"},
        "Spec": {"Availability": "active"},
    },
    {
        "ID": "n4",
        "Description": {"Hostname": "a4", "Resources": {"NanoCPUs": 2e9, "MemoryBytes": GI}},
        "Status": {"State": "unknown"},  # what a new leader says until the node registers
        "Spec": {"Availability": "active"},
    },
]


EMPTY_REQUEST = {"name": "s", "images": [], "paths": [], "fresh": set(), "now": 0.0, "max_age": 300}


def test_the_swarm_s_node_list_keeps_placement_off_drained_and_down_agents():
    table = roster.node_table(NODES)
    assert table["n1"] is table["a1"] and table["a1"].usable and table["a1"].cpu == 4.0
    assert [table[h].usable for h in ("a2", "a3", "a4")] == [False, False, True]
    assert table["a1"].to_dict() == {
        "id": "n1",
        "hostname": "a1",
        "state": "ready",
        "availability": "active",
        "usable": True,
        "cpu": 4.0,
        "mem": table["a1"].mem,
    }
    ledger = document.empty()
    agents = [Declared(a, "default", FULL) for a in ("a1", "a2", "a3", "a4")]
    found = kept_reads.sources(ledger, agents, nodes=table, **EMPTY_REQUEST)
    assert (sorted(found.hinted), sorted(found.unavailable)) == (["a1", "a4"], ["a2", "a3"])
    # Matched by the node ID an agent's read gave, whatever its inventory name.
    assert roster.node_of(table, "other", "n2/slot") is table["n2"]
    # A drained agent that holds the session is still read (its containers decide a rerun).
    place(ledger, "s", [info("a2", cpu=8)], size=1, resources={"cpu": 1})
    found = kept_reads.sources(ledger, agents, nodes=table, **EMPTY_REQUEST)
    assert "a2" in found.read and "a2" not in found.unavailable


def test_agents_that_may_hold_the_session_are_always_read():
    ledger = document.empty()
    reads = [info("a1", cpu=2), info("a2", cpu=8), info("a3", cpu=8)]
    place(ledger, "s1", reads, size=2, resources={"cpu": 1})  # on a2 (roomiest)
    other = {
        "x": {"name": "s2", "cpu": 1.0, "mem": 0, "gpu": 0, "gpu_devices": [], "containers": 1}
    }
    agents = [Declared(a, "default", None) for a in ("a1", "a2", "a3")]
    kept = [reads[0], reads[1], info("a3", cpu=8, sessions=other)]
    kept_reads.remember(ledger, reads_of(kept), 1000.0, by_name(agents))
    assert kept_reads.holders(ledger, "s1") == {"a2"}  # its reservation
    assert kept_reads.holders(ledger, "s2") == {"a3"}  # a kept read saw it (made before the ledger)
    for name, holder in (("s1", "a2"), ("s2", "a3"), ("s3", None)):
        found = kept_reads.sources(
            ledger, agents, name=name, images=[], paths=[], fresh=set(), now=1000.0, max_age=300
        )
        assert found.read == ([holder] if holder else []), name


@settings(max_examples=60, deadline=None)
@clusters_and_requests
def test_property_creates_that_place_by_kept_reads_never_overcommit(offered, gpus, requests):
    """One read of every agent kept before the first create, then every create places by
    the kept reads alone (no agent read again): the reservations still never give out
    more than an agent offers, nor one GPU device twice."""
    ledger = document.empty()
    kept_reads.remember(ledger, reads_of(offered_reads(offered, gpus)), 1000.0)
    for n, request in enumerate(requests):
        kept = [kept_reads.kept_result(record) for record in ledger.agents.values()]
        with contextlib.suppress(Pending):
            place_request(ledger, n, kept, request)
        if n % 3 == 2 and ledger.sessions:  # now and then a session is destroyed
            gone = sorted(ledger.sessions)[0]
            reservations.release(ledger, gone)
    assert_within_offer(ledger, offered, gpus)


def test_an_agent_clock_ahead_never_drops_a_live_session():
    """Case 6 of the living-cluster issue: an agent read taken just before session s1's
    containers existed, by an agent whose clock runs 10 s ahead. By its own clock the read
    looks settled and would drop s1's reservation; timed by the ledger's clock
    (``read_after``: when the ledger asked for it) it is older than s1 and proves nothing."""
    ledger = document.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger.sessions["s1"].session_id
    reservations.mark_ready(ledger, "s1", sid, 1000.0)
    skewed = info("a1", cpu=8, read_at=1000.0 + 10)  # shows no s1: read before it existed
    assert usage.drop_stale(ledger, reads_of([skewed])) == ["s1"]  # the agent's clock alone: 8 of 4
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger.sessions["s1"].session_id
    reservations.mark_ready(ledger, "s1", sid, 1000.0)
    timed = kept_reads.this_run([{**skewed, "read_after": 999.0}])
    assert timed[0].read_at == 999.0
    assert usage.drop_stale(ledger, timed) == []
    assert usage.adjust(timed, ledger)[0].agent.used_cpu == 4.0
    unknown = kept_reads.this_run([skewed])  # no read_after: a read of unknown age
    assert unknown[0].read_at == 0
    assert usage.drop_stale(ledger, unknown) == []


def test_the_agents_of_an_overdue_reservation_are_read_once_after_it_expired():
    ledger = document.empty()
    agents = [Declared("a1", "default", None)]
    kept_reads.remember(ledger, reads_of([info("a1", cpu=8)]), 1000.0, by_name(agents))
    dead_create(ledger)
    args = {"name": "x", "images": [], "paths": [], "fresh": set(), "max_age": 300}
    assert kept_reads.overdue_agents(ledger, 1030.0) == []
    assert kept_reads.sources(ledger, agents, now=1030.0, **args).read == []
    assert kept_reads.overdue_agents(ledger, 1061.0) == ["a1"]
    assert kept_reads.sources(ledger, agents, now=1061.0, **args).read == ["a1"]
    kept_reads.remember(ledger, reads_of([info("a1", cpu=8)]), 1062.0, by_name(agents))
    assert kept_reads.overdue_agents(ledger, 1063.0) == []  # read since: not again
