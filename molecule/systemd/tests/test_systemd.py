"""Verify the systemd scenario: the roles' systemd branches, then a reboot of the node.

The node's PID 1 is systemd. Every service the roles manage is a unit that is enabled
and active; the host firewall's table is loaded by bai-firewall.service, and the Docker
engine's drop-in orders the engine after that unit and re-applies the table. Then the
node's container is restarted from the controller (systemd shuts down on SIGRTMIN+3 and
boots again, in a new network namespace: no rule survives but what the boot loads), and
the same must hold, with the firewall's unit active before the engine started.

Everything is read from the node (systemctl, nft, the engine, the registry's API) or
from the controller's engine, never from what a role reported.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

NODE = "bai-sysd-node"
TABLE = "bai_firewall"
RULES = "/etc/bai-firewall/bai_firewall.nft"
DROPIN = "/etc/systemd/system/docker.service.d/bai-firewall.conf"
REGISTRY_DROPIN = "/etc/systemd/system/docker-registry.service.d/bai-cluster.conf"
# The node's compute address (create.yml: host 11 of 10.219.6.0/24), where the registry listens.
REGISTRY = "10.219.6.11:5000"
PROBE = "bai/sysd-probe:latest"
ROUTES = "/etc/haproxy/routes.d"
ROUTE = "mol-sysd"
SERVICES = (
    "docker.service",
    "docker-registry.service",
    "haproxy.service",
    "prometheus-node-exporter.service",
    "prometheus.service",
)
MARKER_PREFIX = "bai host_firewall "
# A table the tests add before the restart, to tell the old network namespace from a new one.
RESTART_MARK = "bai_restart_mark"
# GET over HTTPS, verified with the CA file (argv[2]) the engine trusts the registry with.
HTTPS_GET = (
    "import ssl, sys, urllib.request; "
    "ctx = ssl.create_default_context(cafile=sys.argv[2]); "
    "print(urllib.request.urlopen(sys.argv[1], timeout=5, context=ctx).read().decode())"
)
REGISTRY_CA = f"/etc/docker/certs.d/{REGISTRY}/ca.crt"


def show(host, unit: str, props: str) -> dict[str, str]:
    """Properties of a unit (names separated by spaces), as systemd has them now."""
    out = host.check_output("systemctl show %s -p %s", unit, ",".join(props.split()))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def table_marker(text: str) -> str:
    """The fingerprint comment of table inet bai_firewall, in nft's output or the rule file."""
    found = [
        line.split('"')[1]
        for line in text.splitlines()
        if line.strip().startswith("comment") and MARKER_PREFIX in line
    ]
    assert len(found) == 1, text
    return found[0]


def loaded_marker(host) -> str:
    live = host.run("nft list table inet %s", TABLE)
    assert live.rc == 0, live.stderr
    return table_marker(live.stdout)


def pid1_started(host) -> int:
    """When the node's PID 1 started, in clock ticks since the (shared) kernel booted."""
    stat = host.check_output("cat /proc/1/stat")
    # Field 22; the command name (field 2) is in parentheses and may hold spaces.
    return int(stat.rsplit(")", 1)[1].split()[19])


def registry_catalog(host) -> list[str]:
    out = host.check_output(
        "python3 -c %s %s %s", HTTPS_GET, f"https://{REGISTRY}/v2/_catalog", REGISTRY_CA
    )
    return json.loads(out)["repositories"]


def controller_image_id(image: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", image],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()


def wait_for(read, seconds: float):
    """read()'s first answer that raises nothing, trying for that long."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return read()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def boot_state(host) -> str:
    return host.run("timeout 60 systemctl is-system-running --wait").stdout.strip()


def test_pid1_is_systemd_and_the_boot_finished(host):
    assert host.check_output("readlink /proc/1/exe").endswith("/systemd")
    assert host.check_output("cat /proc/1/comm") == "systemd"
    assert boot_state(host) in ("running", "degraded")


@pytest.mark.parametrize("unit", SERVICES)
def test_service_is_enabled_and_running(host, unit):
    service = host.service(unit)
    assert service.is_enabled, unit
    assert service.is_running, unit
    assert show(host, unit, "NeedDaemonReload")["NeedDaemonReload"] == "no", unit


def test_firewall_unit_is_an_enabled_oneshot_that_succeeded(host):
    assert host.service("bai-firewall.service").is_enabled
    props = show(
        host,
        "bai-firewall.service",
        "Type ActiveState SubState Result UnitFileState NeedDaemonReload"
        " ExecStart ExecMainCode ExecMainStatus ExecMainStartTimestampMonotonic",
    )
    assert props["Type"] == "oneshot", props
    assert props["ActiveState"] == "active" and props["SubState"] == "exited", props
    assert props["Result"] == "success", props
    assert props["UnitFileState"] == "enabled", props
    assert props["NeedDaemonReload"] == "no", props
    # Its command is `nft -f RULES`, it ran (ExecMainCode 1 = exited) and nft exited 0.
    assert f"argv[]=/usr/sbin/nft -f {RULES} ;" in props["ExecStart"], props
    assert int(props["ExecMainStartTimestampMonotonic"]) > 0, props
    assert (props["ExecMainCode"], props["ExecMainStatus"]) == ("1", "0"), props


def test_the_loaded_table_is_the_file_the_unit_loads(host):
    """The live table carries the fingerprint of the rule file the unit's ExecStart names,
    and it drops inbound traffic by default."""
    rules = host.file(RULES)
    assert rules.is_file and rules.user == "root" and rules.mode == 0o640
    assert loaded_marker(host) == table_marker(rules.content_string)
    live = host.check_output("nft list chain inet %s input", TABLE)
    assert "hook input" in live and "policy drop" in live, live


def test_engine_drop_in_is_active(host):
    """systemd has read the drop-in: the engine wants and follows bai-firewall.service and
    re-applies the table after every start."""
    props = show(host, "docker.service", "DropInPaths After Wants ExecStartPost")
    assert DROPIN in props["DropInPaths"].split(), props
    assert "bai-firewall.service" in props["After"].split(), props
    assert "bai-firewall.service" in props["Wants"].split(), props
    assert f"argv[]=/usr/sbin/nft -f {RULES} ;" in props["ExecStartPost"], props
    # Ordering as systemd resolved it, from the other side too; and after the
    # distribution's ruleset (nftables.service flushes the whole ruleset when enabled).
    firewall = show(host, "bai-firewall.service", "Before After")
    assert "docker.service" in firewall["Before"].split(), firewall
    assert "nftables.service" in firewall["After"].split(), firewall


def test_registry_serves_the_image_the_engine_pulled(host):
    assert "bai/sysd-probe" in registry_catalog(host)
    node_id = host.check_output("docker image inspect --format '{{.Id}}' %s", PROBE)
    assert node_id == controller_image_id(PROBE)


def test_registry_unit_waits_for_the_network_and_comes_back_when_killed(host):
    """The registry binds one address: its drop-in orders it after network-online.target
    and systemd restarts it when it dies (Debian's unit does neither)."""
    props = show(host, "docker-registry.service", "DropInPaths After Wants Restart MainPID")
    assert REGISTRY_DROPIN in props["DropInPaths"].split(), props
    assert "network-online.target" in props["After"].split(), props
    assert "network-online.target" in props["Wants"].split(), props
    assert props["Restart"] == "on-failure", props
    host.check_output("kill -KILL %s", props["MainPID"])
    deadline = time.monotonic() + 30
    now = props
    while time.monotonic() < deadline:
        now = show(host, "docker-registry.service", "ActiveState SubState MainPID NRestarts")
        if now["SubState"] == "running" and now["MainPID"] not in ("0", props["MainPID"]):
            break
        time.sleep(1)
    assert now["ActiveState"] == "active" and int(now["NRestarts"]) >= 1, now
    assert now["MainPID"] not in ("0", props["MainPID"]), now
    catalog = wait_for(lambda: registry_catalog(host), 30)
    assert "bai/sysd-probe" in catalog


def test_a_session_route_reloads_haproxy_through_its_unit(host):
    """bai_appproxy_route (what session_create runs) reloads HAProxy with `service haproxy
    reload`: under systemd the unit's ExecReload, the master keeps its PID, nothing
    restarts, and the new route's port opens; removing the route closes it."""
    before = show(host, "haproxy.service", "MainPID NRestarts")
    route = f"{ROUTES}/{ROUTE}.cfg"
    args = f"session={ROUTE} backend_host=10.219.6.11 backend_port=30001"
    try:
        host.ansible("bai.cluster.bai_appproxy_route", args, check=False)
        header = [
            line.removeprefix("# bai-route ")
            for line in host.file(route).content_string.splitlines()
            if line.startswith("# bai-route ")
        ]
        port = json.loads(header[0])["port"]
        assert host.socket(f"tcp://0.0.0.0:{port}").is_listening
        after = show(host, "haproxy.service", "ActiveState MainPID NRestarts ExecReload")
        assert after["ActiveState"] == "active", after
        assert (after["MainPID"], after["NRestarts"]) == (before["MainPID"], before["NRestarts"])
        assert "code=exited" in after["ExecReload"] and "status=0" in after["ExecReload"], after
    finally:
        host.ansible("bai.cluster.bai_appproxy_route", f"session={ROUTE} state=absent", check=False)
    assert not host.file(route).exists
    assert not host.socket(f"tcp://0.0.0.0:{port}").is_listening


def test_haproxy_unit_reads_the_routes_folder(host):
    """/etc/default/haproxy reached the systemd unit: HAProxy runs with the routes folder."""
    pid = show(host, "haproxy.service", "MainPID")["MainPID"]
    assert pid != "0"
    argv = host.check_output("tr '\\0' ' ' < /proc/%s/cmdline", pid).split()
    assert ["-f", ROUTES] in [argv[i : i + 2] for i in range(len(argv) - 1)], argv


def test_haproxy_keeps_its_master_socket_under_systemd(host):
    """The role's EXTRAOPTS replace the Debian unit's, which name the master CLI socket:
    the role names it again, so the master (-Ws) still answers on it."""
    pid = show(host, "haproxy.service", "MainPID")["MainPID"]
    argv = host.check_output("tr '\\0' ' ' < /proc/%s/cmdline", pid).split()
    assert ["-S", "/run/haproxy-master.sock"] in [argv[i : i + 2] for i in range(len(argv) - 1)]
    assert host.file("/run/haproxy-master.sock").is_socket
    ask = (
        "import socket; s = socket.socket(socket.AF_UNIX); "
        "s.connect('/run/haproxy-master.sock'); s.sendall(b'show proc\\n'); "
        "print(s.recv(65536).decode())"
    )
    answer = host.check_output("python3 -c %s", ask)
    assert "master" in answer and pid in answer, answer


# --- The node restarts ----------------------------------------------------------------


@pytest.fixture(scope="module")
def rebooted(host):
    """Restart the node's container from the controller and wait until systemd booted."""
    loaded = show(host, "bai-firewall.service", "ActiveEnterTimestampMonotonic")
    # A table of our own marks this network namespace: a new namespace has none. (Its
    # inode number, /proc/1/ns/net, can be handed to the new one once the old is freed.)
    host.run_expect([0], "nft add table inet %s", RESTART_MARK)
    before = {
        "pid1_started": pid1_started(host),
        "firewall": int(loaded["ActiveEnterTimestampMonotonic"]),
    }
    subprocess.run(
        ["docker", "restart", "--time", "60", NODE],
        check=True,
        capture_output=True,
        timeout=120,
    )
    deadline = time.monotonic() + 120
    state = ""
    while time.monotonic() < deadline:
        state = boot_state(host)
        if state in ("running", "degraded"):
            break
        time.sleep(1)
    assert state in ("running", "degraded"), (
        state,
        host.run("systemctl --failed --no-legend --plain").stdout,
    )
    return before


def test_restart_gave_a_new_boot_and_network_namespace(host, rebooted):
    assert pid1_started(host) > rebooted["pid1_started"]
    assert host.check_output("cat /proc/1/comm") == "systemd"
    tables = host.check_output("nft list tables")
    assert RESTART_MARK not in tables and TABLE in tables, tables


def test_after_restart_the_table_is_loaded_again(host, rebooted):
    assert loaded_marker(host) == table_marker(host.file(RULES).content_string)


def test_after_restart_the_firewall_was_active_before_the_engine_started(host, rebooted):
    firewall = show(
        host, "bai-firewall.service", "ActiveState Result ActiveEnterTimestampMonotonic"
    )
    engine = show(
        host,
        "docker.service",
        "ActiveState InactiveExitTimestampMonotonic ExecMainStartTimestampMonotonic ExecStartPost",
    )
    assert firewall["ActiveState"] == "active" and firewall["Result"] == "success", firewall
    assert engine["ActiveState"] == "active", engine
    loaded = int(firewall["ActiveEnterTimestampMonotonic"])
    # Loaded in this boot (the clock is the kernel's, shared across the restart) ...
    assert loaded > rebooted["firewall"], (firewall, rebooted)
    # ... and before the engine left "inactive" and before dockerd was started.
    assert 0 < loaded <= int(engine["InactiveExitTimestampMonotonic"]), (firewall, engine)
    assert loaded <= int(engine["ExecMainStartTimestampMonotonic"]), (firewall, engine)
    # The drop-in's re-apply ran at this start and succeeded.
    assert "code=exited" in engine["ExecStartPost"] and "status=0" in engine["ExecStartPost"]


@pytest.mark.parametrize("unit", SERVICES)
def test_after_restart_the_service_runs_again(host, rebooted, unit):
    assert host.service(unit).is_running, unit


def test_after_restart_the_engine_answers_and_the_registry_serves(host, rebooted):
    assert host.check_output("docker info --format '{{.ServerVersion}}'")
    assert "bai/sysd-probe" in registry_catalog(host)
    node_id = host.check_output("docker image inspect --format '{{.Id}}' %s", PROBE)
    assert node_id == controller_image_id(PROBE)


def test_after_restart_the_housekeeping_timer_waits_again(host, rebooted):
    """roles/session_housekeeping's timer is enabled: the boot starts it again."""
    timer = show(host, "bai-cluster-housekeeping.timer", "ActiveState UnitFileState")
    assert timer == {"ActiveState": "active", "UnitFileState": "enabled"}, timer
