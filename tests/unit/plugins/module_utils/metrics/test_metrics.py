"""The cluster's metrics (docs/metrics.md): the ledger's counters, counted in the same
transactions that do what they count (bai_session_ledger run as a module over a real file
ledger), and the text both formats give, parsed back with the reference parsers of the
Prometheus project's Python client (OpenMetrics, and the text format 0.0.4 that
node_exporter's textfile collector reads)."""

from __future__ import annotations

import json
import math

import pytest
from ansible_collections.bai.cluster.plugins.filter.bai_metrics import metrics_text
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_KINDS,
    Stale,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_SESSION,
    LABEL_SESSION_ID,
    LABEL_SIZE,
)
from ansible_collections.bai.cluster.plugins.module_utils.hosts.agent_view import rows
from ansible_collections.bai.cluster.plugins.module_utils.metrics import cluster
from ansible_collections.bai.cluster.plugins.module_utils.metrics.exposition import (
    COUNTER,
    HISTOGRAM,
    Family,
    render,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    counters,
    document,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_fake import ONE_AGENT, ledger_step, reserve
from ledger_fake import fresh_read as read
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_prom

AGENTS = ONE_AGENT


def create(path, name, cpu, *, queue=False, ticket=None, kind="interactive"):
    spec = {"name": name, "size": 1, "resources": {"cpu": cpu}, "owner": "u", "type": kind}
    if kind == "batch":
        spec["command"] = "true"
    return reserve(path, spec, queue=queue, ticket=ticket)


def samples(text, parser=parse_om):
    """{(name, sorted labels): value} of every sample the parser reads."""
    out = {}
    for family in parser(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found, name, **labels):
    return found[(name, tuple(sorted(labels.items())))]


# --- the counters, counted where it happens ----------------------------------------------


def test_the_ledger_counts_waits_ends_passes_and_cancellations_once(tmp_path):
    path = tmp_path / "ledger.json"
    hog = create(path, "hog", 6)
    ledger_step(path, state="ready", name="hog", session_id=hog["session_id"])
    create(path, "late", 4, queue=True)
    create(path, "gone", 2, queue=True)
    shown = ledger_step(path, state="read")
    assert [q["wait"] for q in shown["queue"]] == ["resources", "behind"]
    assert shown["counters"]["wait"]["default"]["count"] == 1  # hog, placed at once
    assert shown["counters"]["wait"]["default"]["buckets"][0] == 1
    compact = json.dumps(json.loads(path.read_text()), separators=(",", ":"), sort_keys=True)
    assert shown["ledger_bytes"] == len(compact)
    assert shown["ledger_max_bytes"] is None  # a file ledger has no cap

    # A destroy releases hog: counted once, however often the destroy runs.
    ledger_step(path, state="absent", name="hog", session_id=hog["session_id"])
    ledger_step(path, state="absent", name="hog", session_id=hog["session_id"])
    # Cancelling a queued session is an end too.
    ledger_step(path, state="absent", name="gone")
    passed = ledger_step(path, state="scheduled", agents=AGENTS, limit=1)
    (start,) = passed["start"]
    assert ledger_step(path, state="read")["queue"][0]["wait"] == "starting"
    create(path, "late", 4, ticket=start["ticket"])

    found = ledger_step(path, state="read")["counters"]
    assert found["ends"] == {"interactive/destroyed": 1, "interactive/cancelled": 1}
    assert found["wait"]["default"]["count"] == 2
    assert found["schedule"]["passes"] == 1 and found["schedule"]["seconds"] >= 0
    assert found["retries"] == 0


def test_a_batch_end_counts_its_result_and_a_restart_its_cause(tmp_path):
    path = tmp_path / "ledger.json"
    job = create(path, "job", 2, kind="batch")
    sid = job["session_id"]
    ended = {"state": "failed", "exit_code": 3, "started": 1.0, "ended": 2.0, "members": {}}
    ledger_step(path, state="absent", name="job", session_id=sid, ended=ended)
    ledger_step(path, state="absent", name="job", session_id=sid, ended=ended)
    assert ledger_step(path, state="read")["counters"]["ends"] == {"batch/failed": 1}

    again = {
        "name": "again",
        "size": 1,
        "resources": {"cpu": 2},
        "owner": "u",
        "type": "batch",
        "command": "true",
        "restarts": 1,
    }
    made = ledger_step(
        path, state="reserved", spec=again, agents=AGENTS, agent_info=[read()], queue=False
    )
    lost = {"state": "lost", "started": 1.0, "ended": 2.0, "members": {}}
    ledger_step(path, state="absent", name="again", session_id=made["session_id"], ended=lost)
    shown = ledger_step(path, state="read")
    assert shown["counters"]["restarts"] == {"lost": 1}
    assert shown["counters"]["ends"] == {"batch/failed": 1}  # a restart is not an end
    assert [q["wait"] for q in shown["queue"]] == ["restart"]


def test_a_write_that_met_a_newer_version_is_counted_in_the_write_that_lands(tmp_path):
    class Flaky(store_.FileStore):
        stale = 2

        def save(self, ledger, snapshot):
            if self.stale:
                self.stale -= 1
                raise Stale("out of sequence")
            super().save(ledger, snapshot)

    store = Flaky(str(tmp_path / "ledger.json"), 5.0)
    done = store_.transact(store, lambda snap, now: {"save": True})
    assert done["attempts"] == 3
    book = json.loads((tmp_path / "ledger.json").read_text())
    assert book["counters"]["retries"] == 2


def test_the_wait_histogram_buckets_by_upper_bound():
    ledger = document.empty()
    for waited in (0, 1, 1.5, 90000, -3):
        counters.observe_wait(ledger, "gpu", waited)
    hist = counters.read(ledger)["wait"]["gpu"]
    assert hist["count"] == 5 and hist["sum"] == pytest.approx(90002.5)
    assert hist["buckets"][0] == 3  # 0, 1 (le=1 holds 1) and a negative clock step
    assert hist["buckets"][1] == 1 and hist["buckets"][-1] == 1  # 1.5; past a day


def test_a_restarts_wait_is_counted_from_its_last_attempts_end():
    entry = {"submitted_at": 100.0, "attempt": 1, "attempts": [{"removed_at": 500.0}]}
    assert counters.queued_since(QueueEntry.from_dict(entry)) == 500.0
    assert counters.queued_since(QueueEntry.from_dict({"submitted_at": 100.0})) == 100.0


# --- the text ----------------------------------------------------------------------------


def test_both_formats_parse_with_the_reference_parsers_and_agree():
    hist = Family("bai_w_seconds", HISTOGRAM, "waits").add_histogram(
        {"resource_group": 'a"b\\c\nd'}, [1, 5], [2, 0, 1], 12.5
    )
    ends = Family("bai_ends", COUNTER, "ends").add({"result": "failed"}, 3)
    om = samples(render([hist, ends], "openmetrics"))
    prom = samples(render([hist, ends], "prometheus"), parse_prom)
    group = 'a"b\\c\nd'
    assert value(om, "bai_w_seconds_bucket", resource_group=group, le="1") == 2
    assert value(om, "bai_w_seconds_bucket", resource_group=group, le="5") == 2
    assert value(om, "bai_w_seconds_bucket", resource_group=group, le="+Inf") == 3
    assert value(om, "bai_w_seconds_count", resource_group=group) == 3
    assert value(om, "bai_ends_total", result="failed") == 3
    assert value(prom, "bai_ends_total", result="failed") == 3
    assert value(prom, "bai_w_seconds_sum", resource_group=group) == 12.5
    assert render([ends], "openmetrics").endswith("# EOF\n")
    assert "# TYPE bai_ends_total counter" in render([ends], "prometheus")
    with pytest.raises(ValueError, match="one of openmetrics, prometheus"):
        render([ends], "json")


def agent_rows(used_cpu=0.0, answered=True, availability=None):
    reads = {"a1": read()} if answered else {"a1": {"unreachable": True, "msg": "gone"}}
    reads["a1"].get("agent", {})["used_cpu"] = used_cpu
    cluster_read = {"records": {"id-a1": availability}} if availability else {}
    return rows(AGENTS, reads, cluster_read), [r for r in reads.values() if "agent" in r]


def container(session, sid, agent="a1", state="running"):
    labels = {LABEL_SESSION: session, LABEL_SESSION_ID: sid, LABEL_SIZE: "1"}
    return {"agent": agent, "name": f"{session}-main1", "state": state, "labels": labels}


def ledger_read(queue, size=None):
    """What the collection is given of a ledger without sessions or counters: its queue
    and, where ``size`` says, its size in bytes and the store's limit."""
    read = {"ledger": {"sessions": {}}, "queue": queue, "counters": {}}
    if size:
        read.update(ledger_bytes=size[0], ledger_max_bytes=size[1])
    return read


def test_the_collection_counts_sessions_agents_and_the_queue_from_the_reads():
    agents, reads = agent_rows(used_cpu=6.0, availability={"availability": "pause", "by": "bob"})
    reads[0]["containers"] = [container("hog", "s1"), container("old", "s2", state="exited")]
    queue = [
        {
            "name": "q1",
            "resource_group": "default",
            "owner": "u",
            "wait": "behind",
            "submitted_at": 900.0,
            "type": "batch",
        },
        {
            "name": "q2",
            "resource_group": "gpu",
            "owner": "v",
            "wait": "bogus",
            "submitted_at": 950.0,
        },
    ]
    ledger = ledger_read(queue, size=(10, 1000))
    found = samples(metrics_text(ledger, agents, reads, 1000.0))
    assert value(found, "bai_sessions", state="PENDING", type="batch", owner="u") == 1
    assert value(found, "bai_sessions", state="running", type="interactive", owner="") == 1
    assert value(found, "bai_sessions", state="stopped", type="interactive", owner="") == 1
    assert value(found, "bai_sessions_pending", resource_group="default", reason="behind") == 1
    assert value(found, "bai_sessions_pending", resource_group="gpu", reason="unknown") == 1
    assert value(found, "bai_queue_oldest_pending_seconds", resource_group="default") == 100
    labels = {"agent": "a1", "resource_group": "default"}
    assert value(found, "bai_agent_availability", availability="paused", **labels) == 1
    assert value(found, "bai_agent_in_service", **labels) == 0
    assert value(found, "bai_agent_cpus_allocated", **labels) == 6
    assert value(found, "bai_agent_session_containers", **labels) == 2
    assert value(found, "bai_ledger_max_bytes") == 1000
    per_agent = [k for k in found if dict(k[1]).get("agent") == "a1"]
    assert len(per_agent) == cluster.PER_AGENT
    # Every end and restart cause is there from the start (rate() needs the zero).
    assert value(found, "bai_session_ends_total", type="batch", result="lost") == 0
    assert value(found, "bai_session_restarts_total", cause="oom") == 0


def test_sessions_waiting_for_one_domain_of_a_level_are_counted_per_level():
    agents, reads = agent_rows()
    queue = [
        {"name": "g1", "resource_group": "default", "wait": "topology", "topology": "rack"},
        {"name": "g2", "resource_group": "default", "wait": "behind", "topology": "rack"},
        {"name": "g3", "resource_group": "default", "wait": "topology", "topology": "block"},
        {"name": "plain", "resource_group": "default", "wait": "resources"},
    ]
    found = samples(metrics_text(ledger_read(queue), agents, reads, 1000.0))
    topology = {
        dict(k[1])["level"]: v for k, v in found.items() if k[0] == "bai_sessions_pending_topology"
    }
    # A series for each level a queued session asks for, counting those that wait for it.
    assert topology == {"block": 1, "rack": 1}
    assert value(found, "bai_sessions_pending", resource_group="default", reason="topology") == 2


def test_an_unread_ledger_and_an_agent_that_does_not_answer_are_metrics_not_errors():
    agents, reads = agent_rows(answered=False)
    found = samples(metrics_text({"failed": True, "msg": "no manager"}, agents, reads, 5.0))
    assert value(found, "bai_ledger_up") == 0
    assert value(found, "bai_agent_up", agent="a1", resource_group="default") == 0
    assert value(found, "bai_agent_read_from_engine", agent="a1", resource_group="default") == 0
    assert not any(key[0].startswith("bai_session_ends") for key in found)


entries = st.lists(
    st.fixed_dictionaries(
        {
            "resource_group": st.sampled_from(["default", "gpu", "big"]),
            "wait": st.sampled_from([*WAIT_KINDS, "", "nonsense"]),
            "submitted_at": st.floats(0, 1000),
            "owner": st.sampled_from(["", "u", "v"]),
        }
    ),
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(entries)
def test_every_queued_session_is_pending_for_exactly_one_reason_of_the_closed_set(queue):
    ledger = ledger_read(queue)
    found = samples(metrics_text(ledger, [], [], 1000.0))
    pending = {k: v for k, v in found.items() if k[0] == "bai_sessions_pending"}
    assert sum(pending.values()) == len(queue)
    assert {dict(k[1])["reason"] for k in pending} <= set(WAIT_KINDS)
    oldest = {
        dict(k[1])["resource_group"]: v
        for k, v in found.items()
        if k[0] == "bai_queue_oldest_pending_seconds"
    }
    for group, age in oldest.items():
        mine = [q["submitted_at"] for q in queue if q["resource_group"] == group]
        assert math.isclose(age, 1000.0 - min(mine)) if mine else age == 0


def test_every_metric_the_alerts_and_the_dashboard_name_is_one_the_collection_writes():
    """Each ``bai_*`` name in monitoring/ (alert rules, dashboard queries) is a sample name
    of a full collection: a typo there would be a panel or an alert that never has data."""
    import pathlib
    import re

    import yaml

    root = pathlib.Path(__file__).resolve().parents[5] / "monitoring"
    agents, reads = agent_rows(used_cpu=1.0)
    queue = [{"name": "q", "resource_group": "default", "wait": "behind", "submitted_at": 1.0}]
    ledger = ledger_read(queue, size=(1, 2))
    proxies = {"appproxy": {"routes": [{"app": "jupyter"}], "counts": {"jupyter": {}}}}
    text = metrics_text(ledger, agents, reads, 10.0, proxies=proxies)
    written = {name for name, _labels in samples(text)}
    rules = yaml.safe_load((root / "bai_cluster.rules.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dashboard = json.loads((root / "bai_cluster.dashboard.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    # Names outside the queries' strings (a label matcher's regular expression is not one).
    bare = [re.sub(r'"[^"]*"', '""', expr) for expr in exprs]
    named = {n for expr in bare for n in re.findall(r"\bbai_[a-z_]+", expr)}
    assert len(dashboard["panels"]) >= 12 and named
    assert named <= written, sorted(named - written)


# --- the interactive apps (metrics/apps.py) -----------------------------------------------


def test_app_routes_and_starts_per_app_proxy_in_both_formats():
    proxies = {
        "appproxy": {
            "routes": [
                {"session": "a", "app": "jupyter", "port": 10206},
                {"session": "b", "app": "jupyter", "port": 10207},
                {"session": "b", "app": "tb", "port": 10208},
            ],
            "counts": {"jupyter": {"started": 3, "failed": 1}},
        },
        # Did not answer (an unreachable or failed read): counted down, nothing else.
        "appproxy2": {"unreachable": True, "msg": "no route to host"},
    }
    text = metrics_text(None, [], [], 10.0, "openmetrics", proxies)
    for parsed in (
        samples(text),
        samples(metrics_text(None, [], [], 10.0, "prometheus", proxies), parse_prom),
    ):
        assert value(parsed, "bai_appproxy_up", appproxy="appproxy") == 1
        assert value(parsed, "bai_appproxy_up", appproxy="appproxy2") == 0
        assert value(parsed, "bai_app_routes", appproxy="appproxy", app="jupyter") == 2
        assert value(parsed, "bai_app_routes", appproxy="appproxy", app="tb") == 1
        started = value(
            parsed, "bai_app_starts_total", appproxy="appproxy", app="jupyter", result="started"
        )
        failed = value(
            parsed, "bai_app_starts_total", appproxy="appproxy", app="jupyter", result="failed"
        )
        assert (started, failed) == (3, 1)
        assert not [
            k
            for k in parsed
            if dict(k[1]).get("appproxy") == "appproxy2" and k[0] != "bai_appproxy_up"
        ]


def test_no_app_proxy_gives_no_app_families():
    text = metrics_text(None, [], [], 10.0)
    assert "bai_app" not in text
