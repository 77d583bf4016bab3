"""Segmentation and the host firewall on the embedded lab, proven by real traffic.

site.yml converges the lab (agent_network + host_firewall included); then every path of
the zones' rules (docs/networks.md#zones-and-the-host-firewall) is tried from the node a
person or an attacker would use. BLOCKED lists, per probing node, every firewalled port of
every host that node can route to; OPEN and LOCAL are the positive controls: the same
listener answers an allowed peer (or the node itself), so "blocked" means the firewall,
not a dead listener, and a test checks every blocked pair has such a control. Probes are
bash /dev/tcp connects with a 3 s timeout, run in parallel inside the probing node:

    open     the listener answered (its first bytes are kept: the lab's stand-ins say
             "bai-lab <node> <port>", sshd says "SSH-2.0-...")
    refused  the host answered with a reset (reachable, nothing listening)
    noroute  the probing node has no route (segmentation)
    timeout  nothing came back: dropped by the firewall

Sessions are named fw-*; the module removes them. The last tests flush agent1's table and
bring it back through the boot script, then through a restart of agent1's inner engine
(waited for, with an assertion, until agent1 is Ready in the swarm again).
"""

from __future__ import annotations

import json
import re
import time

import pytest
from labtools import (
    in_session,
    on_agent,
    probe,
    sweep,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.lab]

IP = {
    "webserver": "10.210.1.10",
    "webserver_mgmt": "10.210.2.10",
    "manager": "10.210.2.11",
    "manager_compute": "10.210.3.11",
    "appproxy": "10.210.3.12",
    "appproxy_public": "10.210.1.12",
    "agent1": "10.210.3.21",
    "agent2": "10.210.3.22",
    "intruder": "10.210.3.32",
}
AGENT_IPS = {"agent1": IP["agent1"], "agent2": IP["agent2"]}
SINGLE = "fw-one"
TABLE = "bai_firewall"


def drops(container) -> int:
    """Packets the input policy counter of the table has dropped on this node."""
    code, out = on_agent(container, "nft", "list", "chain", "inet", TABLE, "input")
    assert code == 0, out
    match = re.search(r"counter packets (\d+) bytes \d+ comment \"dropped by policy\"", out)
    assert match, out
    return int(match.group(1))


@pytest.fixture(scope="module")
def converged(lab, site_converged):
    """site.yml twice (shared by the lab's converge tests): (first, second)."""
    return site_converged


@pytest.fixture(scope="module")
def session(lab, converged, run_playbook):
    """A size-1 session (main1 publishes its sshd on an agent's container port)."""
    sweep(lab, SINGLE)
    run = run_playbook(
        "session_create.yml",
        extra_vars={"session_name": SINGLE, "session_size": 1, "session_resources": {"cpu": 0.5}},
    )
    try:
        assert run.rc == 0, run
        (main1,) = run.stats["bai_session"]["containers"]
        agent = main1["agent"]
        code, out = on_agent(lab[agent], "docker", "port", f"bai-{SINGLE}-main1", "2200/tcp")
        assert code == 0, out
        address, _sep, port = out.splitlines()[0].rpartition(":")
        # Published on the agent's compute address only, not on every address (0.0.0.0).
        assert (address, 30000 <= int(port) <= 31000) == (AGENT_IPS[agent], True), out
        yield agent, int(port)
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": SINGLE})
        sweep(lab, SINGLE)


# --- converge -------------------------------------------------------------------------
def iptables_rules(container) -> str:
    """Docker's iptables ruleset on a node, without counters and timestamps."""
    code, out = on_agent(container, "iptables-save")
    assert code == 0, out
    lines = [re.sub(r" \[\d+:\d+\]$", "", ln) for ln in out.splitlines() if not ln.startswith("#")]
    return "\n".join(lines)


def without_counters(ruleset: str) -> str:
    return re.sub(r"counter packets \d+ bytes \d+", "counter", ruleset)


def ensure_table(container) -> None:
    """Clean-up after a test that deleted the table: load it again if it is still missing."""
    on_agent(
        container,
        "bash",
        "-c",
        f"nft list table inet {TABLE} || nft -f /etc/bai-firewall/{TABLE}.nft",
    )


def load_firewall(container) -> None:
    """What the role, the boot script and the engine hook run: one nft transaction."""
    code, out = on_agent(container, "nft", "-f", f"/etc/bai-firewall/{TABLE}.nft")
    assert code == 0, out


def test_every_component_has_the_table_and_docker_keeps_its_own(lab, converged):
    for name in ("webserver", "manager", "appproxy", "agent1", "agent2"):
        code, out = on_agent(lab[name], "nft", "list", "table", "inet", TABLE)
        assert code == 0, (name, out)
        assert "policy drop" in out and 'comment "bai host_firewall ' in out, (name, out)
    for name in ("manager", "agent1", "agent2"):
        before = iptables_rules(lab[name])
        # Docker's own chains and NAT are there to be kept ...
        assert "-A FORWARD -j DOCKER-USER" in before and "*nat" in before, (name, before)
        tables = set(on_agent(lab[name], "nft", "list", "tables")[1].splitlines())
        load_firewall(lab[name])
        # ... and reloading the firewall leaves every one of Docker's rules as it was.
        assert iptables_rules(lab[name]) == before, name
        assert set(on_agent(lab[name], "nft", "list", "tables")[1].splitlines()) == tables, name


def test_a_rule_file_nft_rejects_is_not_installed_and_the_loaded_table_stays(
    lab, converged, run_playbook
):
    """The template's `nft -c` check: a table name nft cannot parse renders a file that
    is refused; the old file stays on disk and the old table stays loaded."""
    agent1 = lab["agent1"]
    path = f"/etc/bai-firewall/{TABLE}.nft"
    _code, file_before = on_agent(agent1, "sha256sum", path)
    _code, table_before = on_agent(agent1, "nft", "list", "table", "inet", TABLE)
    run = run_playbook(
        "site.yml",
        "--tags",
        "host_firewall",
        "--limit",
        "agent1",
        extra_vars={
            "host_firewall_table": "bai firewall",
            "host_firewall_config_dir": "/etc/bai-firewall",
        },
    )
    assert run.rc != 0, run
    assert any("nft" in f or "failed to validate" in f for f in run.failures), run
    assert on_agent(agent1, "sha256sum", path)[1] == file_before
    assert on_agent(agent1, "nft", "list", "table", "inet", TABLE)[1] == table_before
    _code, out = on_agent(agent1, "bash", "-c", "ls /etc/bai-firewall")
    assert out.split() == [f"{TABLE}.nft"], out  # no half-written file next to it


# --- the user (public zone) ------------------------------------------------------------
def test_user_reaches_the_webserver_but_not_the_manager_or_agents(lab, converged):
    # A temporary counter on agent1 (its own table, removed below) proves that nothing
    # from the public zone even arrives there: segmentation, not the agent's firewall.
    for cmd in (
        ["add", "table", "inet", "fwtest"],
        ["add", "chain", "inet", "fwtest", "c", "{ type filter hook prerouting priority -300; }"],
        ["add", "rule", "inet", "fwtest", "c", "ip", "saddr", "10.210.1.0/24", "counter"],
    ):
        code, out = on_agent(lab["agent1"], "nft", *cmd)
        assert code == 0, out
    try:
        got = probe(
            lab["user"],
            [
                (IP["webserver"], 8080),
                (IP["manager"], 8081),
                (IP["agent1"], 6001),
                (IP["agent2"], 22),
            ],
        )
        _code, seen = on_agent(lab["agent1"], "nft", "list", "table", "inet", "fwtest")
    finally:
        on_agent(lab["agent1"], "nft", "delete", "table", "inet", "fwtest")
    assert got[(IP["webserver"], 8080)] == "open bai-lab webserver 8080", got
    # The user's only route is its default gateway; the lab's network isolation drops
    # everything towards the other zones.
    for target in [(IP["manager"], 8081), (IP["agent1"], 6001), (IP["agent2"], 22)]:
        assert got[target] in ("noroute", "timeout"), got
    assert "counter packets 0 bytes 0" in seen, seen
    # Positive control: the manager's 8081 answers the webserver (its management side).
    ctl = probe(lab["webserver"], [(IP["manager"], 8081)])
    assert ctl[(IP["manager"], 8081)] == "open bai-lab manager 8081", ctl


# --- every firewalled host, from every zone ------------------------------------------------
# Which node owns each address the probes aim at (a control may use any of them).
OWNER = {
    IP["webserver"]: "webserver",
    IP["webserver_mgmt"]: "webserver",
    IP["manager"]: "manager",
    IP["manager_compute"]: "manager",
    IP["appproxy"]: "appproxy",
    IP["appproxy_public"]: "appproxy",
    IP["agent1"]: "agent1",
    IP["agent2"]: "agent2",
}
MANAGER_PORTS = [22, 2377, 2379, 5000, 5432, 6021, 6022, 6379, 7946, 8081]
AGENT_PORTS = [22, 6001, 6009, 7946]
# From each node: the (address, port) pairs that node can route to but host_firewall
# must drop (probe result "timeout": a host without the firewall answers with a reset
# or the listener's banner).
BLOCKED = {
    # public zone: a person's machine
    "user": [(IP["webserver"], 22), *((IP["appproxy_public"], p) for p in (22, 10200, 10201))],
    # compute zone, not a cluster member
    "intruder": [
        *((IP["manager_compute"], p) for p in MANAGER_PORTS),
        *((IP["appproxy"], p) for p in (22, 10200, 10201, 10205)),
        *((ip, p) for ip in AGENT_IPS.values() for p in AGENT_PORTS),
    ],
    # management zone: the webserver may use 8081, 6021, 6379 and SSH (admin network)
    "webserver": [
        *((IP["manager"], p) for p in (2379, 5432, 6022)),
        *((IP["appproxy_public"], p) for p in (22, 10201)),
    ],
    # an agent is a cluster member, but only for etcd, redis, swarm and the registry
    "agent1": [
        *((IP["manager_compute"], p) for p in (22, 5432, 6021, 6022, 8081)),
        *((IP["appproxy"], p) for p in (22, 10200, 10201, 10205)),
        (IP["agent2"], 22),
        (IP["agent2"], 6001),
    ],
    # the manager reaches the agents' RPC, not their SSH (admins come from mgmt only)
    "manager": [(IP["agent1"], 22), (IP["appproxy"], 10201), (IP["appproxy"], 22)],
}
# Positive controls: the same listeners answer the peers the firewall allows, or the
# node itself ("local": 127.0.0.1 is always accepted), so "timeout" above means the
# firewall, not a dead listener.
OPEN = {
    "user": [(IP["webserver"], 8080), (IP["webserver"], 443), (IP["appproxy_public"], 10205)],
    "webserver": [
        *((IP["manager"], p) for p in (22, 6021, 6379, 8081)),
        (IP["appproxy_public"], 10200),
    ],
    "agent1": [
        *((IP["manager_compute"], p) for p in (2377, 2379, 5000, 6379, 7946)),
        (IP["agent2"], 7946),
    ],
    "agent2": [(IP["agent1"], 7946)],
    "manager": [
        *((ip, p) for ip in AGENT_IPS.values() for p in (6001, 6009)),
        (IP["appproxy"], 10200),
        (IP["webserver_mgmt"], 22),
    ],
}
LOCAL = {
    "manager": [22, 5432, 6022],
    "appproxy": [22, 10201],
    "webserver": [22],
    "agent1": [22],
    "agent2": [22, 6001],
}
# A user port of the app proxy with no route behind it: HAProxy does not listen, so the
# control is "reachable" (a reset), not a banner.
NO_LISTENER = {("appproxy", 10205)}


def test_every_blocked_path_has_a_positive_control():
    """The tables above are the test's claim; a blocked pair without a control proves nothing."""
    controls = {(OWNER[ip], port) for pairs in OPEN.values() for ip, port in pairs}
    controls |= {(node, port) for node, ports in LOCAL.items() for port in ports}
    missing = {
        (OWNER[ip], port)
        for pairs in BLOCKED.values()
        for ip, port in pairs
        if (OWNER[ip], port) not in controls
    }
    assert missing == set(), f"blocked paths without a positive control: {sorted(missing)}"
    # Every component host is probed from outside its allow-lists.
    assert {OWNER[ip] for pairs in BLOCKED.values() for ip, _port in pairs} == set(LOCAL)


@pytest.mark.parametrize("source", sorted(BLOCKED))
def test_firewall_drops_what_each_zone_may_not_reach(lab, converged, source):
    got = probe(lab[source], BLOCKED[source])
    assert {t: r for t, r in got.items() if r != "timeout"} == {}, (source, got)


@pytest.mark.parametrize("source", sorted(OPEN))
def test_allowed_peers_reach_the_same_listeners(lab, converged, source):
    got = probe(lab[source], OPEN[source])
    for (ip, port), result in got.items():
        if (OWNER[ip], port) in NO_LISTENER:
            assert result == "refused", (source, ip, port, got)
        else:
            assert result.startswith("open"), (source, ip, port, got)


@pytest.mark.parametrize("host", sorted(LOCAL))
def test_the_listeners_behind_the_blocked_ports_are_up(lab, converged, host):
    got = probe(lab[host], [("127.0.0.1", p) for p in LOCAL[host]])
    assert all(r.startswith("open") for r in got.values()), (host, got)


def test_intruder_udp_to_vxlan_and_gossip_is_dropped(lab, converged):
    """Dedicated counters on agent1 (a table of the test's own, removed after): one chain
    before the firewall's input hook and one after it, both matching only the intruder's
    datagrams. Six arrive, none gets past the firewall."""
    match = f"ip saddr {IP['intruder']} udp dport {{ 4789, 7946 }} counter"
    commands = [
        "add table inet fwcount",
        "add chain inet fwcount before { type filter hook input priority -200; }",
        "add chain inet fwcount after { type filter hook input priority 10; }",
        f"add rule inet fwcount before {match}",
        f"add rule inet fwcount after {match}",
    ]
    script = "nft -f - <<'EOF'\n" + "\n".join(commands) + "\nEOF"
    code, out = on_agent(lab["agent1"], "bash", "-c", script)
    assert code == 0, out
    try:
        for port in (4789, 7946):
            code, out = on_agent(
                lab["intruder"],
                "bash",
                "-c",
                f"for i in 1 2 3; do echo x > /dev/udp/{IP['agent1']}/{port}; done",
            )
            assert code == 0, out
        deadline = time.monotonic() + 10
        while True:
            code, out = on_agent(lab["agent1"], "nft", "list", "table", "inet", "fwcount")
            assert code == 0, out
            seen = [int(n) for n in re.findall(r"counter packets (\d+)", out)]
            if seen[0] >= 6 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        on_agent(lab["agent1"], "nft", "delete", "table", "inet", "fwcount")
    assert seen == [6, 0], out  # [before the firewall, after it]


# One retry, a round-trip timeout that suits a local network (the lab's latency is well
# under a millisecond) and a floor on the rate (nmap otherwise slows down on every probe
# dropped, which is every probe here): the scan of both agents takes seconds instead of
# 80 s. The positive control below uses the same options.
NMAP = (
    "nmap",
    "-Pn",
    "-n",
    "-T4",
    "--max-retries",
    "1",
    "--max-rtt-timeout",
    "100ms",
    "--min-rate",
    "1000",
)
NMAP_PORTS = "1-1024,2375-2377,4789,5000,6001,6009,7946,10200-10300,30000-31000"


def test_nmap_from_the_intruder_finds_no_open_port_on_the_agents(lab, converged):
    code, out = on_agent(lab["intruder"], *NMAP, "-p", NMAP_PORTS, *AGENT_IPS.values())
    assert code == 0, out
    assert " open " not in out and "/open" not in out, out
    # Every port of both agents is filtered (dropped), none closed (answered with a reset).
    assert len(re.findall(r"Not shown: \d+ filtered tcp ports", out)) == 2, out
    assert "closed" not in out, out
    # Positive control: the same options from the manager see the agent RPC port open.
    code, ctl = on_agent(lab["manager"], *NMAP, "-p", "6001", IP["agent1"])
    assert code == 0 and re.search(r"6001/tcp\s+open", ctl), ctl


# --- allowed paths ---------------------------------------------------------------------
def test_manager_reaches_agent_rpc_and_watcher(lab, converged):
    got = probe(lab["manager"], [(ip, p) for ip in AGENT_IPS.values() for p in (6001, 6009)])
    for agent, ip in AGENT_IPS.items():
        assert got[(ip, 6001)] == f"open bai-lab {agent} 6001", got
        assert got[(ip, 6009)] == f"open bai-lab {agent} 6009", got


def test_agents_reach_each_others_swarm_ports_and_the_registry(lab, converged):
    got = probe(
        lab["agent1"],
        [(IP["agent2"], 7946), (IP["manager_compute"], 7946), (IP["manager_compute"], 5000)],
    )
    assert all(r.startswith("open") for r in got.values()), got
    registry = f"{IP['manager_compute']}:5000"
    code, out = on_agent(
        lab["agent1"],
        "curl",
        "-sf",
        "--cacert",
        f"/etc/docker/certs.d/{registry}/ca.crt",
        f"https://{registry}/v2/",
    )
    assert code == 0, out


def test_published_container_port_only_from_the_app_proxy(lab, session):
    agent, port = session
    ip = AGENT_IPS[agent]
    allowed = probe(lab["appproxy"], [(ip, port)])
    assert allowed[(ip, port)].startswith("open SSH-2.0-"), allowed
    blocked = probe(lab["intruder"], [(ip, port)])
    assert blocked[(ip, port)] == "timeout", blocked
    other = "agent2" if agent == "agent1" else "agent1"
    sideways = probe(lab[other], [(ip, port)])  # another agent is not the app proxy
    assert sideways[(ip, port)] == "timeout", sideways
    user = probe(lab["user"], [(ip, port)])
    assert user[(ip, port)] in ("noroute", "timeout"), user
    code, out = on_agent(lab[agent], "nft", "list", "chain", "inet", TABLE, "forward")
    assert code == 0 and re.search(r"counter packets [1-9]\d* .* drop", out), out


def test_another_session_cannot_reach_the_published_port(lab, session, run_playbook):
    """From a container of another session, wherever it runs: the agents' forward chain
    lets only the app proxy reach a published port."""
    agent, port = session
    other = "fw-other"
    sweep(lab, other)
    run = run_playbook(
        "session_create.yml",
        extra_vars={"session_name": other, "session_size": 1, "session_resources": {"cpu": 0.5}},
    )
    try:
        assert run.rc == 0, run
        (main1,) = run.stats["bai_session"]["containers"]
        script = (
            f"timeout 3 bash -c 'exec 3<>/dev/tcp/{AGENT_IPS[agent]}/{port}' "
            "&& echo open || echo closed"
        )
        _code, out = in_session(lab[main1["agent"]], f"bai-{other}-main1", script)
        assert out.strip().endswith("closed"), (main1["agent"], out)
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": other})
        sweep(lab, other)


def test_link_local_egress_is_dropped_for_containers(lab, converged):
    """Proved from the loaded ruleset (no packet is sent to 169.254.0.0/16): in the
    forward hook of every agent, traffic to link-local addresses meets a drop."""
    for name in AGENT_IPS:
        code, out = on_agent(lab[name], "nft", "-j", "list", "chain", "inet", TABLE, "forward")
        assert code == 0, out
        items = json.loads(out)["nftables"]
        chain = next(i["chain"] for i in items if "chain" in i)
        assert (chain["hook"], chain["type"]) == ("forward", "filter"), chain
        drops = []
        for item in items:
            rule = item.get("rule", {})
            exprs = rule.get("expr", [])
            dests = [
                e["match"]["right"]
                for e in exprs
                if "match" in e and e["match"]["left"].get("payload", {}).get("field") == "daddr"
            ]
            if any("drop" in e for e in exprs):
                drops += dests
        assert {"prefix": {"addr": "169.254.0.0", "len": 16}} in drops, (name, drops)
        assert {"prefix": {"addr": "fe80::", "len": 10}} in drops, (name, drops)


# --- persistence (last: restarts agent1's engine) ---------------------------------------
def test_boot_script_restores_a_flushed_ruleset(lab, converged):
    agent1 = lab["agent1"]
    _code, loaded = on_agent(agent1, "nft", "list", "table", "inet", TABLE)
    docker_rules = iptables_rules(agent1)
    code, out = on_agent(agent1, "bash", "-c", "ls /etc/rcS.d | grep -x 'S[0-9]*bai-firewall'")
    assert code == 0, out  # registered for boot (the lab's nodes have no systemd)
    code, out = on_agent(agent1, "nft", "delete", "table", "inet", TABLE)
    assert code == 0, out
    # Everything the assertions look at is read before the finally's repair (which only
    # puts the table back for the next tests when the boot script did not).
    try:
        # Without the table, the intruder reaches the agent: the probe can tell.
        open_ = probe(lab["intruder"], [(IP["agent1"], 6001)])
        started = on_agent(agent1, "/etc/init.d/bai-firewall", "start")
        restored = on_agent(agent1, "nft", "list", "table", "inet", TABLE)
        blocked = probe(lab["intruder"], [(IP["agent1"], 6001)])
        rules = iptables_rules(agent1)
    finally:
        ensure_table(agent1)
    assert open_[(IP["agent1"], 6001)] == "open bai-lab agent1 6001", open_
    assert started[0] == 0, started
    assert restored[0] == 0, restored
    assert without_counters(restored[1]) == without_counters(loaded)
    assert blocked[(IP["agent1"], 6001)] == "timeout", blocked
    assert rules == docker_rules


def test_engine_start_reapplies_a_flushed_ruleset(lab, converged):
    agent1 = lab["agent1"]
    _code, loaded = on_agent(agent1, "nft", "list", "table", "inet", TABLE)
    marker = re.search(r'comment "(bai host_firewall \w+)"', loaded)
    assert marker, loaded
    code, out = on_agent(agent1, "nft", "delete", "table", "inet", TABLE)
    assert code == 0, out
    # Read before the finally's repair, which must not be what the assertions see.
    try:
        restart = on_agent(agent1, "service", "docker", "restart")
        assert restart[0] == 0, restart
        wait_for(
            lambda: (
                on_agent(agent1, "docker", "info", "--format", "{{.Swarm.LocalNodeState}}")
                == (0, "active")
            ),
            "agent1's engine back in the swarm",
        )
        after = on_agent(agent1, "nft", "list", "table", "inet", TABLE)
        blocked = probe(lab["intruder"], [(IP["agent1"], 6001)])
        allowed = probe(lab["manager"], [(IP["agent1"], 6001)])
        rules = iptables_rules(agent1)
    finally:
        ensure_table(agent1)
    # The engine's start hook (/etc/default/docker) loaded the table again.
    assert after[0] == 0 and marker.group(1) in after[1], after
    assert blocked[(IP["agent1"], 6001)] == "timeout", blocked
    assert allowed[(IP["agent1"], 6001)] == "open bai-lab agent1 6001", allowed
    assert "-A FORWARD -j DOCKER-USER" in rules
    # The manager sees agent1 ready again before the next module uses it.
    wait_for(lambda: swarm_status(lab["manager"], "agent1") == "Ready", "agent1 Ready in the swarm")


def swarm_status(manager, hostname: str) -> str:
    _code, out = on_agent(manager, "docker", "node", "ls", "--format", "{{.Hostname}} {{.Status}}")
    return dict(line.split(" ", 1) for line in out.splitlines()).get(hostname, "")
