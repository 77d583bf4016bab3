"""roles/monitoring on the embedded lab: Debian's node_exporter on the seven cluster hosts,
Debian's Prometheus on the monitoring host (the lab's inventory names `manager`), proven
by Prometheus's own HTTP API and by traffic.

site.yml (the shared converge, twice: the second run changes nothing) installs and starts
them. Then:

- Prometheus scrapes every cluster host's exporter, each under its inventory name, and
  has the toolkit's six alert rules loaded and healthy;
- the metrics a housekeeping pass writes (``bai-cluster metrics --textfile``, here copied
  into the monitoring host's textfile folder, as where the pass runs on a cluster host)
  come back from Prometheus as the agents' engines have them (``docker ps``);
- the firewall lets only the monitoring host reach the exporters: the other managers, the
  app proxy, an agent, a host planted on the compute network and a session container
  find port 9100 dropped, while each exporter answers on loopback and to the monitoring
  host; Prometheus's port is shut to the intruder and open to this machine (an
  administrators' network of the lab).
"""

from __future__ import annotations

import re
import time

import pytest
from conftest import REPO, PrometheusAPI, bai_cli
from labtools import ADDRESS, in_session, on_agent, probe, sweep, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.lab]

# The monitoring host's management address: this machine reaches it (bai_admin_cidrs).
PROMETHEUS = "http://10.210.2.11:9090"
EXPORTERS = ADDRESS
# The same hosts on the compute network, where the intruder, the app proxy and the agents
# route to (the managers have an address there too).
COMPUTE = {
    "manager": "10.210.3.11",
    "manager2": "10.210.3.13",
    "appproxy": "10.210.3.12",
    "agent1": "10.210.3.21",
    "agent2": "10.210.3.22",
}
PORT = 9100
TEXTFILE = "/var/lib/prometheus/node-exporter/bai_cluster.prom"
SESSION = "mon-probe"


@pytest.fixture(scope="module", autouse=True)
def converged(site_converged):
    """What is watched here is what site.yml (shared by the lab's converge tests) made."""
    first, second = site_converged
    assert first.rc == 0 and second.rc == 0, (first, second)


@pytest.fixture(scope="module")
def prometheus(lab) -> PrometheusAPI:
    api = PrometheusAPI(PROMETHEUS)
    # A fresh converge started it moments ago: every target scraped once.
    wait_for(
        lambda: len(api.query('up{job="node"} == 1')) == len(EXPORTERS),
        "Prometheus to scrape every exporter",
        seconds=90,
        why=lambda: api.query('up{job="node"}'),
    )
    return api


def test_prometheus_scrapes_every_cluster_host_under_its_inventory_name(prometheus):
    up = {r["metric"]["instance"]: r for r in prometheus.query('up{job="node"}')}
    assert sorted(up) == sorted(EXPORTERS), up
    for host, found in up.items():
        assert found["value"][1] == "1", found
        group = re.sub(r"\d+$", "", host)
        assert found["metric"]["bai_group"] == ("agents" if group == "agent" else group), found
    # Each at the address the monitoring host shares a zone with (agents: compute only).
    targets = prometheus.get("/api/v1/targets")["data"]["activeTargets"]
    scraped = {
        t["labels"]["instance"]: t["scrapeUrl"] for t in targets if t["scrapePool"] == "node"
    }
    assert scraped == {h: f"http://{a}:{PORT}/metrics" for h, a in EXPORTERS.items()}, scraped
    # node_exporter's own metrics, read from each host.
    assert len(prometheus.query('node_load1{job="node"}')) == len(EXPORTERS)


def test_prometheus_has_the_alert_rules_loaded_and_healthy(prometheus):
    groups = prometheus.get("/api/v1/rules")["data"]["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert len(rules) == 6 and all(n.startswith("BaiCluster") for n in rules), sorted(rules)
    wait_for(
        lambda: all(
            r["health"] == "ok"
            for g in prometheus.get("/api/v1/rules")["data"]["groups"]
            for r in g["rules"]
        ),
        "every rule evaluated without error",
        seconds=60,
    )


def running_containers(node) -> int:
    code, out = on_agent(node, "docker", "ps", "-q", "--filter", "label=ai.backend.cluster.session")
    assert code == 0, out
    return len(out.split())


def test_the_housekeeping_textfile_reaches_prometheus_as_the_engines_have_it(
    lab, prometheus, tmp_path, run_playbook
):
    """One session on the lab, one pass's metrics in the textfile folder of the monitoring
    host: Prometheus's per-agent container counts equal docker ps on each agent."""
    sweep(lab, SESSION)
    run = run_playbook(
        "session_create.yml",
        extra_vars={"session_name": SESSION, "session_size": 2, "session_resources": {"cpu": 0.5}},
    )
    try:
        assert run.rc == 0, run
        textfile = tmp_path / "bai_cluster.prom"
        done = bai_cli(tmp_path, "--quiet", "metrics", "--textfile", str(textfile))
        assert done.returncode == 0, (done.stdout, done.stderr)
        collected = re.search(
            r"^bai_metrics_collected_timestamp_seconds (\S+)$", textfile.read_text(), re.M
        )
        assert collected, textfile.read_text()[:2000]
        put_textfile(lab["manager"], textfile.read_text())
        wait_for(
            lambda: (
                prometheus.value("bai_metrics_collected_timestamp_seconds")
                == float(collected.group(1))
            ),
            "Prometheus to scrape this collection from the textfile",
            seconds=60,
        )
        for agent in ("agent1", "agent2"):
            held = prometheus.value(f'bai_agent_session_containers{{agent="{agent}"}}')
            assert held == running_containers(lab[agent]), (agent, held)
            assert prometheus.value(f'bai_agent_up{{agent="{agent}"}}') == 1.0
        assert prometheus.value('sum(bai_sessions{state="running"})') >= 1.0
        # The staleness alert's input, from the exporter of the host holding the file.
        mtime = prometheus.query('node_textfile_mtime_seconds{file=~".*bai_cluster.prom"}')
        assert [m["metric"]["instance"] for m in mtime] == ["manager"], mtime
        assert time.time() - float(mtime[0]["value"][1]) < 120, mtime
    finally:
        on_agent(lab["manager"], "rm", "-f", TEXTFILE)
        run_playbook("session_destroy.yml", extra_vars={"session_name": SESSION})
        sweep(lab, SESSION)


def put_textfile(node, text: str) -> None:
    """Write the textfile as the pass does: a temporary file renamed over the old one."""
    code, out = on_agent(
        node, "sh", "-c", f'cat > "$1.tmp" <<"EOF"\n{text}EOF\nmv "$1.tmp" "$1"', "-", TEXTFILE
    )
    assert code == 0, out


def test_only_the_monitoring_host_reaches_the_exporters(lab):
    blocked = {
        "manager2": [(COMPUTE[h], PORT) for h in ("agent1", "agent2", "appproxy", "manager")],
        "appproxy": [(COMPUTE[h], PORT) for h in ("agent1", "agent2", "manager", "manager2")],
        "agent1": [(COMPUTE[h], PORT) for h in ("agent2", "manager", "appproxy")],
        "intruder": [(a, PORT) for a in COMPUTE.values()] + [(COMPUTE["manager"], 9090)],
        "webserver": [(EXPORTERS[h], PORT) for h in ("manager", "manager2", "manager3")],
    }
    for source, targets in blocked.items():
        got = probe(lab[source], targets)
        assert {t: r for t, r in got.items() if r != "timeout"} == {}, (source, got)
    # Positive controls: the monitoring host reaches each of them, on both its zones,
    # and every exporter answers on its own loopback.
    allowed = probe(lab["manager"], [(a, PORT) for a in [*EXPORTERS.values(), *COMPUTE.values()]])
    assert all(r.startswith("open") for r in allowed.values()), allowed
    for host in EXPORTERS:
        local = probe(lab[host], [("127.0.0.1", PORT)])
        assert local[("127.0.0.1", PORT)].startswith("open"), (host, local)


def test_a_session_container_cannot_scrape_its_own_agent(lab, run_playbook):
    """User code in a session reaches no exporter: not its own agent's (the host's input
    chain sees the container's address), not another agent's."""
    sweep(lab, SESSION)
    run = run_playbook(
        "session_create.yml",
        extra_vars={"session_name": SESSION, "session_size": 1, "session_resources": {"cpu": 0.5}},
    )
    try:
        assert run.rc == 0, run
        (main1,) = run.stats["bai_session"]["containers"]
        own = COMPUTE[main1["agent"]]
        other = COMPUTE["agent2" if main1["agent"] == "agent1" else "agent1"]
        for address in (own, other):
            code, out = in_session(
                lab[main1["agent"]],
                main1["container"],
                f"timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{PORT}'; echo rc=$?",
            )
            assert code == 0 and out.strip().endswith("rc=124"), (address, out)
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": SESSION})
        sweep(lab, SESSION)


def test_a_flag_that_would_split_is_refused_before_anything_changes(lab, run_playbook):
    defaults = "/etc/default/prometheus-node-exporter"
    before = {h: on_agent(lab[h], "cat", defaults) for h in ("agent1", "manager")}
    run = run_playbook(
        str(REPO / "site.yml"),
        "--tags",
        "monitoring",
        extra_vars={"monitoring_exporter_flags": ["--collector.textfile.directory=/a b"]},
    )
    assert run.rc != 0, run
    assert "must hold no blanks" in run.stdout, run.stdout[-3000:]
    assert {h: on_agent(lab[h], "cat", defaults) for h in before} == before
    assert "--collector.textfile.directory=/var/lib/prometheus/node-exporter" in before["agent1"][1]
