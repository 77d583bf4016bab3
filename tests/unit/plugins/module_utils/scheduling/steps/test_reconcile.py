"""Reconcile (module_utils/scheduling/steps/reconcile.py): the ledger and what the agents run,
made to agree, and a lost ledger rebuilt from the labels."""

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    reservations,
    roster,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.kept_reads import (
    fresh_reads,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import reconcile
from ansible_collections.bai.cluster.plugins.plugin_utils import ledger_text
from ledger_fake import (
    GI,
    info,
    place,
    read_with,
    reads_of,
    row,
)


def test_reconcile_rebuilds_a_lost_ledger_from_the_labels():
    """Case 7: an empty (lost) ledger and two agents: the complete session is adopted with
    its resources and GPU devices as labelled; the incomplete one is removed by id."""
    ledger = document.empty()
    reads = [
        read_with("a1", [row("full", "id-f", "main1", devices="0"), row("part", "id-p", "main1")]),
        read_with("a2", [row("full", "id-f", "sub1", agent="a2")]),
    ]
    done = reconcile.reconcile(
        ledger, fresh_reads(reads_of(reads)), now=2000.0, every_agent_read=True
    )
    assert done.adopted == ["full"] and done.dropped == []
    assert done.remove == [
        {"agent": "a1", "session": "part", "session_id": "id-p", "containers": 1}
    ]
    entry = ledger.sessions["full"]
    assert entry.state == document.READY and entry.session_id == "id-f"
    assert [(k.host, k.agent, k.cpu, k.mem, k.gpu_devices) for k in entry.kernels] == [
        ("main1", "a1", 1.0, GI, [0]),
        ("sub1", "a2", 1.0, GI, []),
    ]
    assert roster.given_out(ledger)["a1"] == {"cpu": 1.0, "mem": GI, "gpu_devices": [0]}
    again = reconcile.reconcile(
        ledger, fresh_reads(reads_of(reads[:1] + reads[1:])), now=2001.0, every_agent_read=True
    )
    assert again.adopted == [] and "full" in ledger.sessions  # idempotent


def test_reconcile_removes_nothing_unknown_when_an_agent_was_not_read():
    ledger = document.empty()
    reads = [read_with("a1", [row("part", "id-p", "main1")])]
    done = reconcile.reconcile(
        ledger, fresh_reads(reads_of(reads)), now=2000.0, every_agent_read=False
    )
    assert done.remove == [] and done.spared == ["part"]


def test_reconcile_settles_each_kind_of_reservation():
    ledger = document.empty()
    for name in ("gone", "whole", "partial", "flying", "away"):
        place(ledger, name, [info("a1", cpu=64)], now=1000.0, size=2, resources={"cpu": 1})
    ids = {name: entry.session_id for name, entry in ledger.sessions.items()}
    reservations.mark_ready(ledger, "gone", ids["gone"], 1000.0)
    reservations.mark_ready(ledger, "partial", ids["partial"], 1000.0)
    ledger.sessions["flying"].expires_at = 5000.0  # its create still runs
    for k in ledger.sessions["away"].kernels:
        k.agent = "a9"  # an agent this run did not read
    dead = place(ledger, "dead", [info("a1", cpu=64)], now=1000.0, size=2, resources={"cpu": 1})
    rows = [
        row("whole", ids["whole"], "main1"),
        row("whole", ids["whole"], "sub1"),
        row("partial", ids["partial"], "main1"),
        row("dead", dead.session_id, "main1"),
    ]
    done = reconcile.reconcile(
        ledger, fresh_reads(reads_of([read_with("a1", rows)])), now=2000.0, every_agent_read=False
    )
    assert done.dropped == ["dead", "gone"]  # dead: part of it removed, then dropped
    assert done.adopted == ["whole"]  # expired, complete: its create died after making it
    assert done.incomplete == ["partial"] and done.in_flight == ["flying"]
    assert done.unchecked == ["away"]
    assert done.remove == [
        {"agent": "a1", "session": "dead", "session_id": dead.session_id, "containers": 1}
    ]
    assert sorted(ledger.sessions) == ["away", "flying", "partial", "whole"]


def test_reconcile_keeps_a_session_confirmed_while_it_read_the_agents():
    ledger = document.empty()
    place(ledger, "new", [info("a1")], now=1000.0, size=1)
    reservations.mark_ready(ledger, "new", ledger.sessions["new"].session_id, 1999.0)
    done = reconcile.reconcile(
        ledger, fresh_reads(reads_of([read_with("a1", [])])), now=2000.0, every_agent_read=True
    )
    assert done.in_flight == ["new"] and "new" in ledger.sessions


def test_reconcile_leaves_an_unknown_session_whose_name_another_holds():
    ledger = document.empty()
    place(ledger, "s", [info("a1")], now=1000.0, size=1)
    sid = ledger.sessions["s"].session_id
    reservations.mark_ready(ledger, "s", sid, 1000.0)
    rows = [row("s", sid, "main1", size=1), row("s", "other", "main1", size=1)]
    done = reconcile.reconcile(
        ledger, fresh_reads(reads_of([read_with("a1", rows)])), now=2000.0, every_agent_read=True
    )
    assert done.conflicts == ["s"] and ledger.sessions["s"].session_id == sid
    assert ledger_text.reconcile_lines(done._asdict())[0].startswith("not adopted")


def test_reconcile_starts_what_a_restart_left_stopped_of_a_running_interactive_session():
    """Every container there, some stopped (an engine restart Docker did not recover
    from): start those, one row per agent, and check the mesh again from main1. Not a
    batch session's (stopped members are its end), not one still being created, not one
    missing a container (incomplete), not a container someone paused."""
    ledger = document.empty()
    for name in ("span", "batch", "paused", "flying", "short"):
        place(ledger, name, [info("a1", cpu=64)], now=1000.0, size=2, resources={"cpu": 1})
    ids = {name: entry.session_id for name, entry in ledger.sessions.items()}
    for name in ("span", "batch", "paused", "short"):
        reservations.mark_ready(ledger, name, ids[name], 1000.0)
    ledger.sessions["flying"].expires_at = 5000.0

    def stopped(r, state="exited"):
        return {**r, "state": state}

    batch = [row("batch", ids["batch"], h) for h in ("main1", "sub1")]
    for r in batch:
        r["labels"]["ai.backend.cluster.batch"] = "member"
    reads = [
        read_with(
            "a1",
            [
                row("span", ids["span"], "main1"),
                stopped(batch[0]),
                batch[1],
                row("paused", ids["paused"], "main1"),
                stopped(row("paused", ids["paused"], "sub1"), "paused"),
                stopped(row("flying", ids["flying"], "main1"), "created"),
                row("flying", ids["flying"], "sub1"),
                stopped(row("short", ids["short"], "main1")),
            ],
        ),
        read_with("a2", [stopped(row("span", ids["span"], "sub1", agent="a2"), "created")]),
    ]
    done = reconcile.reconcile(
        ledger, fresh_reads(reads_of(reads)), now=2000.0, every_agent_read=True
    )
    assert done.stopped == [
        {"agent": "a2", "session": "span", "session_id": ids["span"], "containers": ["span-sub1"]}
    ]
    assert done.recheck == [
        {
            "agent": "a1",
            "session": "span",
            "session_id": ids["span"],
            "master": "span-main1",
            "hosts": ["main1", "sub1"],
        }
    ]
    assert done.incomplete == ["short"] and done.in_flight == ["flying"]
