"""The metrics as a real Prometheus reads them (docs/metrics.md): Debian's
``prometheus-node-exporter`` serves the textfile the housekeeping pass writes, Debian's
``prometheus`` scrapes it every second with the toolkit's alert rules loaded, and the test
asks Prometheus's HTTP API, never the file.

The programs are the packages' own binaries (scripts/prometheus_tools.sh downloads and
unpacks them under .cache/tools: nothing is installed), run by this test on loopback ports
of its own. The cluster is this machine's engine with a virtual agent of 2 CPUs and the
test's own ledger, as in test_metrics_local.py. After each step - a create, a queued create,
a paused agent, a destroy that starts the queued session - one pass writes the textfile
(``bai-cluster metrics --textfile``), and once Prometheus has scraped that very collection
its answers are compared with ``docker ps`` and with what the step did. Then every query
of the Grafana dashboard (monitoring/bai_cluster.dashboard.json) returns data, every alert
rule evaluates without error, and the stale-textfile alert's input
(node_textfile_mtime_seconds) is there.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import REPO, PrometheusAPI, agent_containers, bai_cli, cli_ok, virtual_agents

pytestmark = pytest.mark.integration

AGENT = "p-agent1"
MONITORING = REPO / "monitoring"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Prometheus(PrometheusAPI):
    textfile: Path = Path()


def wait_ready(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer in 60 s: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    tools = subprocess.run(
        [str(REPO / "scripts" / "prometheus_tools.sh")], capture_output=True, text=True, check=True
    )
    bin_dir = Path(tools.stdout.strip())
    work = tmp_path_factory.mktemp("prometheus")
    textfile = work / "textfile"
    textfile.mkdir()
    exporter_port, prometheus_port = free_port(), free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(MONITORING / "bai_cluster.rules.yml")],
        "scrape_configs": [
            {"job_name": "node", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
        ],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    logs = {name: work / f"{name}.log" for name in ("exporter", "prometheus")}
    argv = {
        "exporter": [
            str(bin_dir / "prometheus-node-exporter"),
            f"--web.listen-address=127.0.0.1:{exporter_port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfile}",
        ],
        "prometheus": [
            str(bin_dir / "prometheus"),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
    }
    running = {}
    try:
        for name, args in argv.items():
            with logs[name].open("w") as out:
                running[name] = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        wait_ready(
            f"http://127.0.0.1:{exporter_port}/metrics", running["exporter"], logs["exporter"]
        )
        url = f"http://127.0.0.1:{prometheus_port}"
        wait_ready(url + "/-/ready", running["prometheus"], logs["prometheus"])
        yield Prometheus(url, textfile)
    finally:
        for process in running.values():
            process.terminate()
            process.wait(timeout=30)


def one_pass(tmp: Path, inventory: Path, prom: Prometheus) -> None:
    """The housekeeping pass's metrics, then the scrape of that very collection."""
    target = prom.textfile / "bai_cluster.prom"
    run = bai_cli(tmp, "-i", str(inventory), "--quiet", "metrics", "--textfile", str(target))
    assert run.returncode == 0, (run.stdout, run.stderr)
    collected = next(
        float(line.split()[-1])
        for line in target.read_text().splitlines()
        if line.startswith("bai_metrics_collected_timestamp_seconds ")
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if prom.value("bai_metrics_collected_timestamp_seconds") == collected:
            return
        time.sleep(0.5)
    raise AssertionError("Prometheus did not scrape the collection within 30 s")


def test_prometheus_reads_what_the_engine_runs_after_each_step(prometheus, docker_client, tmp_path):
    prom = prometheus
    inventory = virtual_agents(tmp_path, (AGENT,), cpu=2)
    names = ["it-p-run", "it-p-big"]
    where = f'agent="{AGENT}"'
    try:
        cli_ok(tmp_path, inventory, "session", "create", names[0], "-n", "2", "--cpu", "0.5",
               "--mem", "128m")  # fmt: skip
        one_pass(tmp_path, inventory, prom)
        count, sessions = agent_containers(docker_client, AGENT)
        assert (count, sessions) == (2, {names[0]})
        assert prom.value(f"bai_agent_session_containers{{{where}}}") == count
        assert prom.value('sum(bai_sessions{state="running"})') == 1
        assert prom.value(f"bai_agent_cpus_allocated{{{where}}} / bai_agent_cpus{{{where}}}") == 0.5

        cli_ok(tmp_path, inventory, "session", "create", names[1], "-n", "1", "--cpu", "2",
               "--mem", "128m", "--queue")  # fmt: skip
        one_pass(tmp_path, inventory, prom)
        assert agent_containers(docker_client, AGENT) == (2, {names[0]})
        assert prom.value('bai_sessions_pending{reason="resources"}') == 1
        assert prom.value("sum(bai_sessions_pending)") == 1
        assert prom.value("bai_queue_oldest_pending_seconds") > 0

        cli_ok(tmp_path, inventory, "agent", "pause", AGENT, "--reason", "prometheus test")
        one_pass(tmp_path, inventory, prom)
        assert prom.value(f"bai_agent_in_service{{{where}}}") == 0
        assert prom.value(f'bai_agent_availability{{{where},availability="paused"}}') == 1
        cli_ok(tmp_path, inventory, "agent", "activate", AGENT)

        cli_ok(tmp_path, inventory, "session", "destroy", names[0])  # its pass starts it-p-big
        one_pass(tmp_path, inventory, prom)
        count, sessions = agent_containers(docker_client, AGENT)
        assert (count, sessions) == (1, {names[1]})
        assert prom.value(f"bai_agent_session_containers{{{where}}}") == count
        assert prom.value("sum(bai_sessions_pending)") == 0
        ended = 'bai_session_ends_total{type="interactive",result="destroyed"}'
        assert prom.value(ended) == 1
        assert prom.value('bai_queue_wait_seconds_count{resource_group="default"}') == 2

        # Every panel of the dashboard has data, every alert rule evaluates.
        dashboard = json.loads((MONITORING / "bai_cluster.dashboard.json").read_text())
        empty = [
            (panel["title"], target["expr"])
            for panel in dashboard["panels"]
            for target in panel["targets"][:1]
            if not prom.query(target["expr"])
        ]
        assert empty == [], empty
        groups = prom.get("/api/v1/rules")["data"]["groups"]
        health = {
            r["name"]: (r["health"], r.get("lastError", "")) for g in groups for r in g["rules"]
        }
        assert len(health) == 6 and all(h == ("ok", "") for h in health.values()), health
        stale_input = 'node_textfile_mtime_seconds{file=~"(.*/)?bai_cluster\\\\.prom"}'
        assert prom.value(stale_input) > time.time() - 120
        assert prom.value("node_textfile_scrape_error") == 0
        series = prom.value('count({__name__=~"bai_.+"})')
        per_agent = prom.value(f'count({{__name__=~"bai_agent_.+",{where}}})')
        print(f"Prometheus holds {series:.0f} bai_ series, {per_agent:.0f} for the agent")
        assert per_agent == 14
    finally:
        bai_cli(tmp_path, "-i", str(inventory), "--quiet", "agent", "activate", AGENT)
        for name in names:
            bai_cli(tmp_path, "-i", str(inventory), "--quiet", "session", "destroy", name)
