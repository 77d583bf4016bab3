"""Reserved against observed usage (module_utils/scheduling/ledger/usage.py), and the property
that placement through the ledger never gives out more than an agent offers, however
stale the agents' reads."""

import contextlib

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import ContainerRow
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    reservations,
    roster,
    usage,
)
from hypothesis import settings
from ledger_fake import (
    GI,
    assert_within_offer,
    clusters_and_requests,
    info,
    offered_reads,
    place,
    place_request,
    reads_of,
    row,
)


def test_stale_reads_never_overcommit_cpu():
    """Six creates read the agent before any of them reserved (the race of issue 12):
    through the ledger the fifth and sixth are PENDING, not placed."""
    reads = [info("a1", cpu=16)]  # all six read an idle agent
    ledger = document.empty()
    placed, pending = [], []
    for i in range(6):
        try:
            place(ledger, f"s{i}", reads, size=2, resources={"cpu": 2})
            placed.append(i)
        except Pending as exc:
            pending.append(str(exc))
    assert placed == [0, 1, 2, 3]
    assert len(pending) == 2 and all("PENDING" in p for p in pending)
    assert roster.given_out(ledger)["a1"]["cpu"] == 16.0


def test_stale_reads_never_give_one_gpu_twice():
    reads = [info("a1", gpus=(0, 1, 2, 3))]
    ledger = document.empty()
    for i in range(2):
        place(ledger, f"g{i}", reads, size=2, resources={"gpu": 1})
    with pytest.raises(Pending):
        place(ledger, "g2", reads, size=1, resources={"gpu": 1})
    assert roster.given_out(ledger)["a1"]["gpu_devices"] == [0, 1, 2, 3]


def test_a_reserved_session_counts_once_when_the_agent_also_sees_it():
    """The agent reports the session's running containers; the reservation replaces them."""
    ledger = document.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger.sessions["s1"].session_id
    seen = {sid: {"cpu": 4.0, "mem": 2 * GI, "gpu": 0, "gpu_devices": [], "containers": 2}}
    reads = [info("a1", cpu=8, sessions=seen, used=(4.0, 2 * GI, 0))]
    counted = usage.adjust(reads_of(reads), ledger)[0].agent
    assert counted.used_cpu == 4.0 and counted.used_mem == 2 * GI
    place(ledger, "s2", reads, size=2, resources={"cpu": 2})  # 4 of 8 left: fits
    with pytest.raises(Pending):
        place(ledger, "s3", reads, size=1, resources={"cpu": 1})


def test_sessions_the_ledger_does_not_know_count_as_read():
    seen = {"old": {"cpu": 6.0, "mem": GI, "gpu": 1, "gpu_devices": [0], "containers": 3}}
    reads = [info("a1", cpu=8, gpus=(0, 1), sessions=seen, used=(6.0, GI, 1))]
    counted = usage.adjust(reads_of(reads), document.empty())[0].agent
    assert (counted.used_cpu, counted.used_gpu, counted.gpu_in_use) == (6.0, 1, [0])


def test_same_name_while_another_run_creates_it_is_pending():
    ledger = document.empty()
    place(ledger, "s1", [info("a1")], size=1)
    entry = ledger.sessions["s1"]
    with pytest.raises(Pending, match="being created by another run"):
        usage.before_placing(entry, [], read_at=1001.0)
    with pytest.raises(Pending, match="being created by another run"):
        usage.before_placing(entry, [{"name": "partial"}], read_at=1001.0)


def test_same_name_ready_is_a_rerun_or_stale():
    ledger = document.empty()
    place(ledger, "s1", [info("a1")], size=1)
    entry = ledger.sessions["s1"]
    reservations.mark_ready(ledger, "s1", entry.session_id, 1000.0)
    assert usage.before_placing(entry, [{"name": "c"}], read_at=1001.0) == "exists"
    with pytest.raises(Pending, match="run again"):  # made after this run read the agents
        usage.before_placing(entry, [], read_at=1001.0)
    assert usage.before_placing(entry, [], read_at=1000.0 + document.STALE_MARGIN_S) == "place"
    assert usage.before_placing(None, [], read_at=0) == "place"
    assert usage.before_placing(None, [{"name": "c"}], read_at=0) == "exists"


def test_ready_reservations_whose_containers_are_gone_are_dropped():
    ledger = document.empty()
    place(ledger, "gone", [info("a1")], size=1)
    place(ledger, "kept", [info("a1")], size=1)
    for name in ("gone", "kept"):
        reservations.mark_ready(ledger, name, ledger.sessions[name].session_id, 1000.0)
    kept_id = ledger.sessions["kept"].session_id
    seen = {kept_id: {"cpu": 1.0, "mem": GI, "gpu": 0, "gpu_devices": [], "containers": 1}}
    early = [info("a1", read_at=1000.0 + document.STALE_MARGIN_S / 2, sessions=seen)]
    assert usage.drop_stale(ledger, reads_of(early)) == []  # within the margin: maybe not seen yet
    later = [info("a1", read_at=1000.0 + document.STALE_MARGIN_S, sessions=seen)]
    assert usage.drop_stale(ledger, reads_of(later)) == ["gone"]
    assert sorted(ledger.sessions) == ["kept"]


def test_observed_sessions_count_every_container_in_any_state():
    def item(sid, state, cpu, devices=""):
        labels = row(f"name-{sid}", sid, "main1", cpu=cpu, devices=devices)["labels"]
        return {"State": state, "Labels": labels}

    listed = [
        item("a", "running", 2),
        item("a", "exited", 2),
        item("b", "created", 1, devices="0,1"),
        {"State": "running", "Labels": {}},
    ]
    seen = usage.observed_sessions([ContainerRow.of_engine(entry) for entry in listed])
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


@settings(max_examples=60, deadline=None)
@clusters_and_requests
def test_property_reads_taken_before_every_create_never_overcommit(offered, gpus, requests):
    """Every create read the agents before any reserved; whatever is placed stays within
    each agent's CPU, memory and GPU devices, and no device is given twice."""
    reads = offered_reads(offered, gpus)
    ledger = document.empty()
    for n, request in enumerate(requests):
        with contextlib.suppress(Pending):
            place_request(ledger, n, reads, request)
    assert_within_offer(ledger, offered, gpus)


def test_a_settled_ready_session_counts_as_read_so_stopping_it_frees_its_share():
    ledger = document.empty()
    place(ledger, "s1", [info("a1", cpu=8)], size=2, resources={"cpu": 2})
    sid = ledger.sessions["s1"].session_id
    reservations.mark_ready(ledger, "s1", sid, 1000.0)
    stopped = {sid: {"cpu": 0.0, "mem": 0, "gpu": 0, "gpu_devices": [], "containers": 2}}
    recent = info("a1", cpu=8, sessions=stopped, read_at=1000.0 + document.STALE_MARGIN_S / 2)
    # The read may predate it.
    assert usage.adjust(reads_of([recent]), ledger)[0].agent.used_cpu == 4.0
    settled = info("a1", cpu=8, sessions=stopped, read_at=1000.0 + document.STALE_MARGIN_S)
    assert usage.adjust(reads_of([settled]), ledger)[0].agent.used_cpu == 0.0
