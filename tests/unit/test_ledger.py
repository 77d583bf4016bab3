"""The reservation ledger (module_utils/scheduling/ledger.py): pure logic, and the property that
placement through it never gives out more than an agent offers, however stale the
agents' reads."""

import contextlib

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import LedgerError, Pending
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_CPU,
    LABEL_GPU,
    LABEL_GPU_DEVICES,
    LABEL_MEM,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import ledger as book
from ansible_collections.bai.cluster.plugins.module_utils.session.plan import (
    agents_from_info,
    plan_session,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec
from ansible_collections.bai.cluster.plugins.plugin_utils import ledger_text
from hypothesis import given, settings
from hypothesis import strategies as st

GI = 1024**3


def info(name, cpu=16, mem_g=32, gpus=(), read_at=1000.0, sessions=None, used=(0.0, 0, 0)):
    """One registered bai_agent_info result, as the agent reported it at read_at."""
    return {
        "agent": {
            "name": name,
            "group": "default",
            "cpu": cpu,
            "mem": mem_g * GI,
            "gpu": len(gpus),
            "used_cpu": used[0],
            "used_mem": used[1],
            "used_gpu": used[2],
            "gpu_devices": list(gpus),
            "gpu_in_use": sorted({d for s in (sessions or {}).values() for d in s["gpu_devices"]}),
        },
        "containers": [],
        "images": {},
        "paths": {},
        "sessions": sessions or {},
        "read_at": read_at,
    }


def place(ledger, name, reads, now=1000.0, **request):
    """What bai_session_ledger does under the lock: expire, adjust, place, reserve."""
    spec = normalize_spec({"name": name, **request})
    book.expire(ledger, now, reads)
    agents, existing, inventory = agents_from_info(None, None, book.adjust(reads, ledger))
    plan = {**plan_session(spec, agents, existing, inventory=inventory), "spec_hash": "h"}
    ledger["sessions"][name] = book.reservation(plan, now=now, ttl=60)
    return plan


def test_loads_and_dumps_round_trip():
    ledger = book.empty()
    place(ledger, "s1", [info("a1")], size=2)
    assert book.loads(book.dumps(ledger)) == ledger


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),  # a truncated file is damaged, never an empty ledger (case 7)
        (" \n", "empty"),
        ("{", "not JSON"),
        ("[]", "no 'sessions'"),
        ('{"version": 9, "sessions": {}}', "version 9"),
    ],
)
def test_a_damaged_ledger_is_refused_with_the_reason(text, says):
    with pytest.raises(LedgerError, match=says):
        book.loads(text)


def test_stale_reads_never_overcommit_cpu():
    """Six creates read the agent before any of them reserved (the race of issue 12):
    through the ledger the fifth and sixth are PENDING, not placed."""
    reads = [info("a1", cpu=16)]  # all six read an idle agent
    ledger = book.empty()
    placed, pending = [], []
    for i in range(6):
        try:
            place(ledger, f"s{i}", reads, size=2, resources={"cpu": 2})
            placed.append(i)
        except Pending as exc:
            pending.append(str(exc))
    assert placed == [0, 1, 2, 3]
    assert len(pending) == 2 and all("PENDING" in p for p in pending)
    assert book.given_out(ledger)["a1"]["cpu"] == 16.0


def test_stale_reads_never_give_one_gpu_twice():
    reads = [info("a1", gpus=(0, 1, 2, 3))]
    ledger = book.empty()
    for i in range(2):
        place(ledger, f"g{i}", reads, size=2, resources={"gpu": 1})
    with pytest.raises(Pending):
        place(ledger, "g2", reads, size=1, resources={"gpu": 1})
    assert book.given_out(ledger)["a1"]["gpu_devices"] == [0, 1, 2, 3]


def test_a_reserved_session_counts_once_when_the_agent_also_sees_it():
    """The agent reports the session's running containers; the reservation replaces them."""
    ledger = book.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger["sessions"]["s1"]["session_id"]
    seen = {sid: {"cpu": 4.0, "mem": 2 * GI, "gpu": 0, "gpu_devices": [], "containers": 2}}
    reads = [info("a1", cpu=8, sessions=seen, used=(4.0, 2 * GI, 0))]
    counted = book.adjust(reads, ledger)[0]["agent"]
    assert counted["used_cpu"] == 4.0 and counted["used_mem"] == 2 * GI
    place(ledger, "s2", reads, size=2, resources={"cpu": 2})  # 4 of 8 left: fits
    with pytest.raises(Pending):
        place(ledger, "s3", reads, size=1, resources={"cpu": 1})


def test_sessions_the_ledger_does_not_know_count_as_read():
    seen = {"old": {"cpu": 6.0, "mem": GI, "gpu": 1, "gpu_devices": [0], "containers": 3}}
    reads = [info("a1", cpu=8, gpus=(0, 1), sessions=seen, used=(6.0, GI, 1))]
    counted = book.adjust(reads, book.empty())[0]["agent"]
    assert (counted["used_cpu"], counted["used_gpu"], counted["gpu_in_use"]) == (6.0, 1, [0])


def test_a_creating_reservation_expires_and_frees_its_share():
    ledger = book.empty()
    place(ledger, "dead", [info("a1", cpu=4)], now=1000.0, size=1, resources={"cpu": 4})
    with pytest.raises(Pending):
        place(ledger, "next", [info("a1", cpu=4)], now=1030.0, size=1, resources={"cpu": 4})
    place(ledger, "next", [info("a1", cpu=4)], now=1061.0, size=1, resources={"cpu": 4})
    assert sorted(ledger["sessions"]) == ["next"]


def test_a_ready_reservation_does_not_expire():
    ledger = book.empty()
    place(ledger, "s1", [info("a1", cpu=4)], size=1, resources={"cpu": 4})
    sid = ledger["sessions"]["s1"]["session_id"]
    assert book.mark_ready(ledger, "s1", sid, 1001.0)
    assert not book.mark_ready(ledger, "s1", sid, 1002.0)  # once
    assert book.expire(ledger, 10**9, [info("a1")]) == book.Expiry([], [], [])


def test_release_is_limited_to_the_runs_own_session():
    ledger = book.empty()
    place(ledger, "s1", [info("a1")], size=1)
    assert not book.release(ledger, "s1", "another-run")
    assert not book.mark_ready(ledger, "s1", "another-run", 1001.0)
    assert "s1" in ledger["sessions"]
    assert book.release(ledger, "s1")
    assert not book.release(ledger, "s1")


def test_same_name_while_another_run_creates_it_is_pending():
    ledger = book.empty()
    place(ledger, "s1", [info("a1")], size=1)
    entry = ledger["sessions"]["s1"]
    with pytest.raises(Pending, match="being created by another run"):
        book.before_placing(entry, [], read_at=1001.0)
    with pytest.raises(Pending, match="being created by another run"):
        book.before_placing(entry, [{"name": "partial"}], read_at=1001.0)


def test_same_name_ready_is_a_rerun_or_stale():
    ledger = book.empty()
    place(ledger, "s1", [info("a1")], size=1)
    entry = ledger["sessions"]["s1"]
    book.mark_ready(ledger, "s1", entry["session_id"], 1000.0)
    assert book.before_placing(entry, [{"name": "c"}], read_at=1001.0) == "exists"
    with pytest.raises(Pending, match="run again"):  # made after this run read the agents
        book.before_placing(entry, [], read_at=1001.0)
    assert book.before_placing(entry, [], read_at=1000.0 + book.STALE_MARGIN_S) == "place"
    assert book.before_placing(None, [], read_at=0) == "place"
    assert book.before_placing(None, [{"name": "c"}], read_at=0) == "exists"


def test_ready_reservations_whose_containers_are_gone_are_dropped():
    ledger = book.empty()
    place(ledger, "gone", [info("a1")], size=1)
    place(ledger, "kept", [info("a1")], size=1)
    for name in ("gone", "kept"):
        book.mark_ready(ledger, name, ledger["sessions"][name]["session_id"], 1000.0)
    kept_id = ledger["sessions"]["kept"]["session_id"]
    seen = {kept_id: {"cpu": 1.0, "mem": GI, "gpu": 0, "gpu_devices": [], "containers": 1}}
    early = [info("a1", read_at=1000.0 + book.STALE_MARGIN_S / 2, sessions=seen)]
    assert book.drop_stale(ledger, early) == []  # within the margin: maybe not seen yet
    later = [info("a1", read_at=1000.0 + book.STALE_MARGIN_S, sessions=seen)]
    assert book.drop_stale(ledger, later) == ["gone"]
    assert sorted(ledger["sessions"]) == ["kept"]


def test_observed_sessions_count_every_container_in_any_state():
    def item(sid, state, cpu, devices=""):
        labels = {LABEL_SESSION_ID: sid, LABEL_CPU: str(cpu), LABEL_MEM: str(GI), LABEL_GPU: "0"}
        labels["ai.backend.cluster.session"] = f"name-{sid}"
        if devices:
            labels.update({LABEL_GPU_DEVICES: devices, LABEL_GPU: str(len(devices.split(",")))})
        return {"State": state, "Labels": labels}

    seen = book.observed_sessions(
        [
            item("a", "running", 2),
            item("a", "exited", 2),
            item("b", "created", 1, devices="0,1"),
            {"State": "running", "Labels": {}},
        ]
    )
    assert seen["a"] == {  # a stopped container holds its share until it is removed
        "name": "name-a",
        "cpu": 4.0,
        "mem": 2 * GI,
        "gpu": 0,
        "gpu_devices": [],
        "containers": 2,
        "ledger": "",  # made before containers named their ledger
    }
    assert seen["b"]["gpu_devices"] == [0, 1] and seen["b"]["cpu"] == 1.0
    assert sorted(seen) == ["a", "b"]


# Random clusters (CPUs per agent, GPU devices per agent) and create requests (size,
# CPUs, GPUs, multi-node), for the two properties below.
clusters_and_requests = given(
    offered=st.lists(st.integers(1, 16), min_size=1, max_size=4),
    gpus=st.lists(st.integers(0, 4), min_size=4, max_size=4),
    requests=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=12,
    ),
)


def assert_within_offer(ledger, offered, gpus):
    """What the reservations give out stays within each agent ``a<i>``'s CPUs (offered),
    memory (2 GiB per CPU) and GPU devices, and no device is given twice."""
    for agent, out in book.given_out(ledger).items():
        i = int(agent[1:])
        assert out["cpu"] <= offered[i]
        assert out["mem"] <= offered[i] * 2 * GI
        assert len(out["gpu_devices"]) == len(set(out["gpu_devices"]))
        assert set(out["gpu_devices"]) <= set(range(gpus[i]))


@settings(max_examples=60, deadline=None)
@clusters_and_requests
def test_property_reads_taken_before_every_create_never_overcommit(offered, gpus, requests):
    """Every create read the agents before any reserved; whatever is placed stays within
    each agent's CPU, memory and GPU devices, and no device is given twice."""
    reads = [
        info(f"a{i}", cpu=cpu, mem_g=cpu * 2, gpus=tuple(range(gpus[i])))
        for i, cpu in enumerate(offered)
    ]
    ledger = book.empty()
    for n, (size, cpu, gpu, multi) in enumerate(requests):
        with contextlib.suppress(Pending):
            place(
                ledger,
                f"s{n}",
                reads,
                size=size,
                mode="multi-node" if multi else "single-node",
                resources={"cpu": cpu, "mem": f"{cpu}g", "gpu": gpu},
            )
    assert_within_offer(ledger, offered, gpus)


def test_a_settled_ready_session_counts_as_read_so_stopping_it_frees_its_share():
    ledger = book.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger["sessions"]["s1"]["session_id"]
    book.mark_ready(ledger, "s1", sid, 1000.0)
    stopped = {sid: {"cpu": 0.0, "mem": 0, "gpu": 0, "gpu_devices": [], "containers": 2}}
    recent = info("a1", cpu=8, sessions=stopped, read_at=1000.0 + book.STALE_MARGIN_S / 2)
    assert book.adjust([recent], ledger)[0]["agent"]["used_cpu"] == 4.0  # read may predate it
    settled = info("a1", cpu=8, sessions=stopped, read_at=1000.0 + book.STALE_MARGIN_S)
    assert book.adjust([settled], ledger)[0]["agent"]["used_cpu"] == 0.0


# --- Kept reads: what lets a create read only the agents it must ---------------------

AGENTS = [{"name": "a1", "group": "default", "resources": {"cpu": 8}}]
FULL = {"cpu": 4, "mem": "8g", "gpu": 0}  # every number a hint needs


def test_a_kept_read_counts_every_reserved_session_even_one_it_saw_stopped():
    """A live read lets a stopped session's share go; a kept one never does, since the
    session may have been started again since: kept reads only ever say yes."""
    ledger = book.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger["sessions"]["s1"]["session_id"]
    book.mark_ready(ledger, "s1", sid, 1000.0)
    stopped = {
        sid: {"name": "s1", "cpu": 0.0, "mem": 0, "gpu": 0, "gpu_devices": [], "containers": 2}
    }
    settled = info("a1", cpu=8, sessions=stopped, read_at=1000.0 + book.STALE_MARGIN_S)
    assert book.adjust([settled], ledger)[0]["agent"]["used_cpu"] == 0.0
    book.remember(ledger, [settled], 1010.0, book.declarations(AGENTS))
    kept = book.kept_result(ledger["agents"]["a1"])
    assert kept["kept"] and kept["containers"] == []
    assert book.adjust([kept], ledger)[0]["agent"]["used_cpu"] == 4.0


def test_destroy_frees_what_kept_reads_saw_the_session_use():
    ledger = book.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger["sessions"]["s1"]["session_id"]
    running = {
        sid: {"name": "s1", "cpu": 4.0, "mem": 0, "gpu": 1, "gpu_devices": [1], "containers": 2}
    }
    read = info("a1", cpu=8, gpus=(0, 1), sessions=running, used=(4.0, 0, 1))
    book.remember(ledger, [read], 1000.0)
    assert ledger["agents"]["a1"]["agent"]["gpu_in_use"] == [1]
    assert book.release(ledger, "s1", sid)
    record = ledger["agents"]["a1"]
    assert record["sessions"] == {}
    assert record["agent"]["used_cpu"] == 0.0 and record["agent"]["used_gpu"] == 0
    assert record["agent"]["gpu_in_use"] == []
    kept = book.adjust([book.kept_result(record)], ledger)[0]["agent"]
    assert kept["used_cpu"] == 0.0


def test_remember_keeps_what_an_older_read_knew_of_images_and_paths():
    ledger = book.empty()
    first = {
        **info("a1"),
        "images": {"img:1": {"present": True, "env": ["A=1"]}},
        "paths": {"/d": True},
    }
    book.remember(ledger, [first], 1000.0)
    second = {**info("a1"), "images": {"img:2": {"present": False}}, "paths": {}}
    book.remember(ledger, [second], 1001.0)
    record = ledger["agents"]["a1"]
    assert record["images"] == {"img:1": {"present": True}, "img:2": {"present": False}}
    assert record["paths"] == {"/d": True}
    assert record["stored_at"] == 1001.0
    book.remember(ledger, [book.kept_result(record)], 1002.0)  # kept results are not reads
    assert ledger["agents"]["a1"]["stored_at"] == 1001.0


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
    ledger = book.empty()
    read = {**info("a1"), "images": {"img:1": {"present": True}}, "paths": {"/d": False}}
    book.remember(ledger, [read], 1000.0, book.declarations(AGENTS))
    if change.get("drop"):
        ledger["agents"].clear()
    agents = [
        {
            **AGENTS[0],
            "group": change.get("group", "default"),
            "resources": change.get("resources", AGENTS[0]["resources"]),
        }
    ]
    found = book.sources(
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
    ledger = book.empty()
    place(ledger, "s1", [info("a1", cpu=4, mem_g=8)], size=2, resources={"cpu": 1, "mem": "1g"})
    declared = {"name": "a1", "group": "default", "resources": FULL}
    hint = book.hint(declared)
    assert hint is not None and hint["hint"] and hint["kept"]
    assert (hint["agent"]["cpu"], hint["agent"]["mem"], hint["agent"]["gpu_devices"]) == (
        4.0,
        8 * GI,
        [],
    )
    # Its load is what the ledger gave out there, whatever the agent last showed.
    (counted,) = book.adjust([hint], ledger)
    assert (counted["agent"]["used_cpu"], counted["agent"]["used_mem"]) == (2.0, 2 * GI)
    # GPU devices are detected on the agent: without gpu: 0 (or an earlier read) no hint.
    assert book.hint({**declared, "resources": {"cpu": 4, "mem": "8g"}}) is None
    # An earlier read gives what the declaration does not; the node list gives CPU, memory.
    record = {"agent": {"cpu": 2, "mem": GI, "gpu_devices": [0, 1], "id": "n1"}}
    from_read = book.hint({**declared, "resources": None}, record)
    assert from_read is not None and from_read["agent"]["gpu_devices"] == [0, 1]
    node = {"cpu": 6.0, "mem": 3 * GI, "id": "n1"}
    from_node = book.hint({**declared, "resources": {"gpu": 0}}, None, node)
    assert from_node is not None and from_node["agent"]["cpu"] == 6.0


def test_a_missing_ledger_places_by_no_hint():
    """A ledger that is missing is never read as empty: every agent is read first."""
    agents = [{"name": a, "group": "default", "resources": FULL} for a in ("a1", "a2")]
    args = {"name": "s", "images": [], "paths": [], "fresh": set(), "now": 0.0, "max_age": 300}
    assert sorted(book.sources(book.empty(), agents, **args).hinted) == ["a1", "a2"]
    assert book.sources(book.empty(), agents, hints=False, **args).read == ["a1", "a2"]


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
    table = book.node_table(NODES)
    assert table["n1"] is table["a1"] and table["a1"]["usable"] and table["a1"]["cpu"] == 4.0
    assert [table[h]["usable"] for h in ("a2", "a3", "a4")] == [False, False, True]
    ledger = book.empty()
    agents = [{"name": a, "group": "default", "resources": FULL} for a in ("a1", "a2", "a3", "a4")]
    found = book.sources(ledger, agents, nodes=table, **EMPTY_REQUEST)
    assert (sorted(found.hinted), sorted(found.unavailable)) == (["a1", "a4"], ["a2", "a3"])
    # Matched by the node ID an agent's read gave, whatever its inventory name.
    record = {"agent": {"id": "n2/slot"}}
    assert book.node_of(table, "other", record) is table["n2"]
    # A drained agent that holds the session is still read (its containers decide a rerun).
    place(ledger, "s", [info("a2", cpu=8)], size=1, resources={"cpu": 1})
    found = book.sources(ledger, agents, nodes=table, **EMPTY_REQUEST)
    assert "a2" in found.read and "a2" not in found.unavailable


def test_agents_that_may_hold_the_session_are_always_read():
    ledger = book.empty()
    reads = [info("a1", cpu=2), info("a2", cpu=8), info("a3", cpu=8)]
    place(ledger, "s1", reads, size=2, resources={"cpu": 1})  # on a2 (roomiest)
    other = {
        "x": {"name": "s2", "cpu": 1.0, "mem": 0, "gpu": 0, "gpu_devices": [], "containers": 1}
    }
    agents = [{"name": a, "group": "default", "resources": None} for a in ("a1", "a2", "a3")]
    kept = [reads[0], reads[1], info("a3", cpu=8, sessions=other)]
    book.remember(ledger, kept, 1000.0, book.declarations(agents))
    assert book.holders(ledger, "s1") == {"a2"}  # its reservation
    assert book.holders(ledger, "s2") == {"a3"}  # a kept read saw it (made before the ledger)
    for name, holder in (("s1", "a2"), ("s2", "a3"), ("s3", None)):
        found = book.sources(
            ledger, agents, name=name, images=[], paths=[], fresh=set(), now=1000.0, max_age=300
        )
        assert found.read == ([holder] if holder else []), name


@settings(max_examples=60, deadline=None)
@clusters_and_requests
def test_property_creates_that_place_by_kept_reads_never_overcommit(offered, gpus, requests):
    """One read of every agent kept before the first create, then every create places by
    the kept reads alone (no agent read again): the reservations still never give out
    more than an agent offers, nor one GPU device twice."""
    reads = [
        info(f"a{i}", cpu=cpu, mem_g=cpu * 2, gpus=tuple(range(gpus[i])))
        for i, cpu in enumerate(offered)
    ]
    ledger = book.empty()
    book.remember(ledger, reads, 1000.0)
    for n, (size, cpu, gpu, multi) in enumerate(requests):
        kept = [book.kept_result(record) for record in ledger["agents"].values()]
        with contextlib.suppress(Pending):
            place(
                ledger,
                f"s{n}",
                kept,
                size=size,
                mode="multi-node" if multi else "single-node",
                resources={"cpu": cpu, "mem": f"{cpu}g", "gpu": gpu},
            )
        if n % 3 == 2 and ledger["sessions"]:  # now and then a session is destroyed
            gone = sorted(ledger["sessions"])[0]
            book.release(ledger, gone)
    assert_within_offer(ledger, offered, gpus)


def test_an_agent_clock_ahead_never_drops_a_live_session():
    """Case 6 of the living-cluster issue: an agent read taken just before session s1's
    containers existed, by an agent whose clock runs 10 s ahead. By its own clock the read
    looks settled and would drop s1's reservation; timed by the ledger's clock
    (``read_after``: when the ledger asked for it) it is older than s1 and proves nothing."""
    ledger = book.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger["sessions"]["s1"]["session_id"]
    book.mark_ready(ledger, "s1", sid, 1000.0)
    skewed = info("a1", cpu=8, read_at=1000.0 + 10)  # shows no s1: read before it existed
    assert book.drop_stale(ledger, [skewed]) == ["s1"]  # the agent's clock alone: 8 of 4
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger["sessions"]["s1"]["session_id"]
    book.mark_ready(ledger, "s1", sid, 1000.0)
    timed = book.on_ledger_clock({**skewed, "read_after": 999.0})
    assert book.drop_stale(ledger, [timed]) == []
    assert book.adjust([timed], ledger)[0]["agent"]["used_cpu"] == 4.0
    unknown = book.on_ledger_clock(skewed)  # no read_after: a read of unknown age
    assert book.drop_stale(ledger, [unknown]) == []


# --- expiry after the agents were checked, and reconcile ----------------------------


def seen(sid, containers, name="s", cpu=1.0):
    """An agent read's ``sessions`` row: ``containers`` of session ``sid`` there."""
    return {
        sid: {
            "name": name,
            "cpu": cpu * containers,
            "mem": 0,
            "gpu": 0,
            "gpu_devices": [],
            "containers": containers,
        }
    }


def dead_create(ledger, name="dead", size=2, now=1000.0):
    """A create that reserved at ``now`` (TTL 60 s) and died; its session id."""
    place(ledger, name, [info("a1", cpu=8)], now=now, size=size, resources={"cpu": 1})
    return ledger["sessions"][name]["session_id"]


@pytest.mark.parametrize(
    ("found", "outcome"),
    [(0, "dropped"), (2, "adopted"), (1, "stuck")],
)
def test_an_expired_reservation_is_settled_by_what_its_agents_run(found, outcome):
    """Case 1: past its expiry a reservation is dropped only when a fresh read shows its
    create left nothing; all of it makes the session (adopted), part of it keeps counting
    until reconcile removes it."""
    ledger = book.empty()
    sid = dead_create(ledger)
    read = info("a1", cpu=8, read_at=1061.0, sessions=seen(sid, found) if found else {})
    done = book.expire(ledger, 1061.0, [read])
    assert getattr(done, outcome) == ["dead"]
    assert ("dead" in ledger["sessions"]) == (outcome != "dropped")
    if outcome == "adopted":
        assert ledger["sessions"]["dead"]["state"] == book.READY


def test_an_expired_reservation_keeps_counting_until_its_agents_are_read():
    ledger = book.empty()
    dead_create(ledger)
    assert book.expire(ledger, 1061.0) == book.Expiry([], [], [])  # no read: not checked
    kept = {**info("a1", cpu=8, read_at=1061.0), "kept": True}
    assert book.expire(ledger, 1061.0, [kept]) == book.Expiry([], [], [])  # a kept read
    older = info("a1", cpu=8, read_at=999.0)  # read before it was reserved
    assert book.expire(ledger, 1061.0, [older]) == book.Expiry([], [], [])
    assert "dead" in ledger["sessions"]
    with pytest.raises(Pending):  # it still holds its share
        kept = {**info("a1", cpu=2), "kept": True}
        place(ledger, "next", [kept], now=1061.0, size=1, resources={"cpu": 1})


def test_the_agents_of_an_overdue_reservation_are_read_once_after_it_expired():
    ledger = book.empty()
    agents = [{"name": "a1", "group": "default", "resources": None}]
    book.remember(ledger, [info("a1", cpu=8)], 1000.0, book.declarations(agents))
    dead_create(ledger)
    args = {"name": "x", "images": [], "paths": [], "fresh": set(), "max_age": 300}
    assert book.overdue_agents(ledger, 1030.0) == []
    assert book.sources(ledger, agents, now=1030.0, **args).read == []
    assert book.overdue_agents(ledger, 1061.0) == ["a1"]
    assert book.sources(ledger, agents, now=1061.0, **args).read == ["a1"]
    book.remember(ledger, [info("a1", cpu=8)], 1062.0, book.declarations(agents))
    assert book.overdue_agents(ledger, 1063.0) == []  # read since: not again


def row(name, sid, host, agent="a1", size=2, cpu=1.0, devices=""):
    """A bai_agent_info container row with the labels a session container carries."""
    labels = {
        "ai.backend.cluster.session": name,
        LABEL_SESSION_ID: sid,
        "ai.backend.cluster.host": host,
        "ai.backend.cluster.size": str(size),
        "ai.backend.cluster.spec-hash": "h",
        "ai.backend.cluster.agent": agent,
        LABEL_CPU: str(cpu),
        LABEL_MEM: str(GI),
        LABEL_GPU: str(len(devices.split(","))) if devices else "0",
    }
    if devices:
        labels[LABEL_GPU_DEVICES] = devices
    return {"name": f"{name}-{host}", "state": "running", "labels": labels}


def read_with(agent, rows, read_at=2000.0):
    return {**info(agent, cpu=8, read_at=read_at), "containers": rows}


def test_reconcile_rebuilds_a_lost_ledger_from_the_labels():
    """Case 7: an empty (lost) ledger and two agents: the complete session is adopted with
    its resources and GPU devices as labelled; the incomplete one is removed by id."""
    ledger = book.empty()
    reads = [
        read_with("a1", [row("full", "id-f", "main1", devices="0"), row("part", "id-p", "main1")]),
        read_with("a2", [row("full", "id-f", "sub1", agent="a2")]),
    ]
    done = book.reconcile(ledger, reads, now=2000.0, every_agent_read=True)
    assert done.adopted == ["full"] and done.dropped == []
    assert done.remove == [
        {"agent": "a1", "session": "part", "session_id": "id-p", "containers": 1}
    ]
    entry = ledger["sessions"]["full"]
    assert entry["state"] == book.READY and entry["session_id"] == "id-f"
    assert [
        (k["host"], k["agent"], k["cpu"], k["mem"], k["gpu_devices"]) for k in entry["kernels"]
    ] == [
        ("main1", "a1", 1.0, GI, [0]),
        ("sub1", "a2", 1.0, GI, []),
    ]
    assert book.given_out(ledger)["a1"] == {"cpu": 1.0, "mem": GI, "gpu_devices": [0]}
    again = book.reconcile(ledger, reads[:1] + reads[1:], now=2001.0, every_agent_read=True)
    assert again.adopted == [] and "full" in ledger["sessions"]  # idempotent


def test_reconcile_removes_nothing_unknown_when_an_agent_was_not_read():
    ledger = book.empty()
    reads = [read_with("a1", [row("part", "id-p", "main1")])]
    done = book.reconcile(ledger, reads, now=2000.0, every_agent_read=False)
    assert done.remove == [] and done.spared == ["part"]


def test_reconcile_settles_each_kind_of_reservation():
    ledger = book.empty()
    for name in ("gone", "whole", "partial", "flying", "away"):
        place(ledger, name, [info("a1", cpu=64)], now=1000.0, size=2, resources={"cpu": 1})
    ids = {name: entry["session_id"] for name, entry in ledger["sessions"].items()}
    book.mark_ready(ledger, "gone", ids["gone"], 1000.0)
    book.mark_ready(ledger, "partial", ids["partial"], 1000.0)
    ledger["sessions"]["flying"]["expires_at"] = 5000.0  # its create still runs
    for k in ledger["sessions"]["away"]["kernels"]:
        k["agent"] = "a9"  # an agent this run did not read
    dead = place(ledger, "dead", [info("a1", cpu=64)], now=1000.0, size=2, resources={"cpu": 1})
    rows = [
        row("whole", ids["whole"], "main1"),
        row("whole", ids["whole"], "sub1"),
        row("partial", ids["partial"], "main1"),
        row("dead", dead["session_id"], "main1"),
    ]
    done = book.reconcile(ledger, [read_with("a1", rows)], now=2000.0, every_agent_read=False)
    assert done.dropped == ["dead", "gone"]  # dead: part of it removed, then dropped
    assert done.adopted == ["whole"]  # expired, complete: its create died after making it
    assert done.incomplete == ["partial"] and done.in_flight == ["flying"]
    assert done.unchecked == ["away"]
    assert done.remove == [
        {"agent": "a1", "session": "dead", "session_id": dead["session_id"], "containers": 1}
    ]
    assert sorted(ledger["sessions"]) == ["away", "flying", "partial", "whole"]


def test_reconcile_keeps_a_session_confirmed_while_it_read_the_agents():
    ledger = book.empty()
    place(ledger, "new", [info("a1")], now=1000.0, size=1)
    book.mark_ready(ledger, "new", ledger["sessions"]["new"]["session_id"], 1999.0)
    done = book.reconcile(ledger, [read_with("a1", [])], now=2000.0, every_agent_read=True)
    assert done.in_flight == ["new"] and "new" in ledger["sessions"]


def test_reconcile_leaves_an_unknown_session_whose_name_another_holds():
    ledger = book.empty()
    place(ledger, "s", [info("a1")], now=1000.0, size=1)
    sid = ledger["sessions"]["s"]["session_id"]
    book.mark_ready(ledger, "s", sid, 1000.0)
    rows = [row("s", sid, "main1", size=1), row("s", "other", "main1", size=1)]
    done = book.reconcile(ledger, [read_with("a1", rows)], now=2000.0, every_agent_read=True)
    assert done.conflicts == ["s"] and ledger["sessions"]["s"]["session_id"] == sid
    assert ledger_text.reconcile_lines(done._asdict())[0].startswith("not adopted")
