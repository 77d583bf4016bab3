"""Verify roles/session_housekeeping on a systemd host: the timer runs reconcile.

The node doubles as the controller (create.yml mounts this checkout and its venv there)
and is a login host (test_submit_host.py): the role installed
bai-cluster-housekeeping.timer, which runs `bai-cluster -i INVENTORY --quiet session
reconcile` as the login host's service account, with its inventory, against the node's
own engine (agent sysd-node, reached over SSH) every 20 s (converge.yml). A session
container that a dead create left incomplete (one of a session of two, unknown to the
ledger) is made on the node's engine behind Ansible's back; a pass must remove it. A pass
started while something holds the lock must skip.

Everything is read from the node: systemctl, the engine, the pass's log.
"""

from __future__ import annotations

import json
import time
import uuid

TIMER = "bai-cluster-housekeeping.timer"
SERVICE = "bai-cluster-housekeeping.service"
LOCK = "/run/lock/bai-cluster-housekeeping.lock"
LOG = "/var/log/bai-cluster/housekeeping.log"
LEFTOVER = "mol-hk-left"
PROBE = "bai/sysd-probe:latest"
PREFIX = "ai.backend.cluster."
SERVICE_USER = "bai-cluster"


def show(host, unit: str, props: str) -> dict[str, str]:
    out = host.check_output("systemctl show %s -p %s", unit, ",".join(props.split()))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def leftovers(host) -> list[str]:
    """The node engine's containers of session LEFTOVER, in any state."""
    out = host.check_output("docker ps -aq --filter %s", f"label={PREFIX}session={LEFTOVER}")
    return out.split()


def log_text(host) -> str:
    return host.file(LOG).content_string if host.file(LOG).exists else ""


def test_the_timer_is_enabled_and_waiting(host):
    timer = show(host, TIMER, "ActiveState UnitFileState NeedDaemonReload")
    assert timer == {
        "ActiveState": "active",
        "UnitFileState": "enabled",
        "NeedDaemonReload": "no",
    }, timer
    service = show(host, SERVICE, "Type User ExecStart")
    assert service["Type"] == "oneshot" and service["User"] == SERVICE_USER, service
    assert "/usr/local/sbin/bai-cluster-housekeeping" in service["ExecStart"], service


def test_a_pass_removes_what_a_dead_create_left(host):
    """main1 of a session of two, labelled as a create makes it, with no ledger entry:
    reconcile removes it once every agent was read (the login inventory has one)."""
    labels = {
        "session": LEFTOVER,
        "session-id": str(uuid.uuid4()),
        "size": "2",
        "host": "main1",
        "role": "main",
        "idx": "1",
        "cpu": "1",
        "mem": str(256 * 2**20),
        "gpu": "0",
        "resource-group": "default",
        "agent": "sysd-node",
    }
    argv = " ".join(f"--label {PREFIX}{k}={v}" for k, v in labels.items())
    made = host.run(f"docker create --name {LEFTOVER}-main1 {argv} {PROBE} /probe.txt")
    assert made.rc == 0, made.stderr
    assert len(leftovers(host)) == 1
    began = time.monotonic()
    removed = f"removed 1 container(s) of incomplete session {LEFTOVER}"
    # A pass starts at most 20 s after the last one ended; one takes about 5-20 s here.
    # Its summary comes once reconcile ends, then the pass's end line.
    while time.monotonic() - began < 150:
        text = log_text(host)
        if removed in text and "(exit" in text[text.index(removed) :]:
            break
        time.sleep(2)
    assert removed in text, text[-3000:]
    assert leftovers(host) == []
    after = text[text.index(removed) :]
    assert "end: bai-cluster session reconcile (exit 0)" in after, text[-3000:]
    assert "start: bai-cluster session reconcile" in text[: text.index(removed)]
    print(f"the timer's reconcile removed the leftover {time.monotonic() - began:.0f} s after")


def test_a_pass_skips_while_another_holds_the_lock(host):
    """flock takes the lock (waiting for a pass that runs), then starts the service: the
    pass finds the lock held, logs that it skipped and succeeds. Holding the lock, it
    first waits until the unit is no longer activating: a timer's pass releases the lock as its
    script exits, a moment before systemd ends the unit's start job, and a `systemctl
    start` in that moment joins that job instead of starting a pass (CI of 1c39a3e, with
    Prometheus on the node too, hit it)."""
    before = len(log_text(host))
    state = f"systemctl show -p ActiveState --value {SERVICE}"
    idle = f"while [ $({state}) = activating ]; do sleep 0.2; done"
    held = host.run("timeout 120 flock %s sh -c %s", LOCK, f"{idle}; systemctl start {SERVICE}")
    assert held.rc == 0, held.stderr
    new = log_text(host)[before:]
    assert f"pass skipped: another one holds {LOCK}" in new, new
    result = show(host, SERVICE, "Result ExecMainStatus")
    assert result == {"Result": "success", "ExecMainStatus": "0"}, result


def test_a_lock_file_root_made_stops_no_pass(host):
    """Someone ran a pass (or flock) as root first, so the lock file is root's: the
    pass, as the service account, only reads it, and runs."""
    host.check_output("rm -f %s && install -m 0644 -o root -g root /dev/null %s", LOCK, LOCK)
    before = len(log_text(host))
    done = host.run("systemctl start %s", SERVICE)
    assert done.rc == 0, done.stderr
    result = show(host, SERVICE, "Result ExecMainStatus")
    assert result == {"Result": "success", "ExecMainStatus": "0"}, result
    new = log_text(host)[before:]
    assert "start: bai-cluster" in new and "pass skipped" not in new, new
    assert host.file(LOCK).user == "root"


def test_the_pass_is_roots_and_its_log_folder_is_not_world_readable(host):
    """The script is root's; the log's folder and the log are the passes' user's."""
    script = host.file("/usr/local/sbin/bai-cluster-housekeeping")
    assert (script.user, script.mode) == ("root", 0o755), oct(script.mode)
    folder = host.file("/var/log/bai-cluster")
    assert (folder.user, folder.mode) == (SERVICE_USER, 0o750), oct(folder.mode)
    log = host.file(LOG)
    assert log.is_file and log.user == SERVICE_USER and log.mode == 0o640, oct(log.mode)


TEXTFILE = "/var/lib/prometheus/node-exporter/bai_cluster.prom"


def test_each_pass_writes_the_metrics_for_node_exporter(host):
    """After reconcile, the pass writes the cluster's metrics where Debian's
    node_exporter reads textfiles: the pass's user's file, world-readable, in the
    Prometheus text format (parsed back with the reference parser), counting the
    reconciles the timer ran and the node's agent as up."""
    from prometheus_client.parser import text_string_to_metric_families

    began = time.monotonic()
    while not host.file(TEXTFILE).exists and time.monotonic() - began < 90:
        time.sleep(2)
    made = host.file(TEXTFILE)
    assert made.is_file and (made.user, made.mode) == (SERVICE_USER, 0o644), oct(made.mode)
    assert "end: bai-cluster metrics --textfile" in log_text(host)
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(made.content_string)
        for s in family.samples
    }
    assert found[("bai_reconcile_passes_total", ())] >= 1, found
    agent = (("agent", "sysd-node"), ("resource_group", "default"))
    assert found[("bai_agent_up", agent)] == 1, found
    assert found[("bai_ledger_up", ())] == 1


QUERY = (
    "import json, sys, urllib.parse, urllib.request; "
    "url = 'http://127.0.0.1:9090/api/v1/query?' + urllib.parse.urlencode({'query': sys.argv[1]}); "
    "print(json.dumps(json.load(urllib.request.urlopen(url, timeout=5))['data']['result']))"
)


# Prometheus's loaded rule groups (its rules API).
RULES = (
    "import json, urllib.request; "
    "url = 'http://127.0.0.1:9090/api/v1/rules'; "
    "print(json.dumps(json.load(urllib.request.urlopen(url, timeout=5))['data']['groups']))"
)


def test_prometheus_reads_the_pass_metrics_through_the_nodes_exporter(host):
    """roles/monitoring under systemd: the node is its own monitoring host, so
    Prometheus scrapes the node's exporter, whose textfile collector serves the file
    the pass wrote - the whole path a cluster's metrics take, through real units."""

    def query(expr: str) -> list:
        return json.loads(host.check_output("python3 -c %s %s", QUERY, expr))

    began = time.monotonic()
    while not query('bai_agent_up{agent="sysd-node"}') and time.monotonic() - began < 90:
        time.sleep(3)
    (up,) = query('bai_agent_up{agent="sysd-node"}')
    assert up["value"][1] == "1" and up["metric"]["job"] == "node", up
    (mtime,) = query('node_textfile_mtime_seconds{file=~".*bai_cluster.prom"}')
    assert time.time() - float(mtime["value"][1]) < 300, mtime

    # The alert is loaded and evaluated (else its absence below would prove nothing).
    def stale_rule() -> dict:
        loaded = {
            rule["name"]: rule
            for group in json.loads(host.check_output("python3 -c %s", RULES))
            for rule in group["rules"]
        }
        assert "BaiClusterMetricsStale" in loaded, sorted(loaded)
        return loaded["BaiClusterMetricsStale"]

    began = time.monotonic()
    # Evaluated once at least (every 15 s): "0001-01-01..." until then.
    while stale_rule()["lastEvaluation"].startswith("0001") and time.monotonic() - began < 60:
        time.sleep(3)
    stale = stale_rule()
    assert stale["health"] == "ok" and not stale["lastEvaluation"].startswith("0001"), stale
    firing = query('ALERTS{alertname="BaiClusterMetricsStale"}')
    assert firing == [], firing
