"""Segmentation and the host firewall on the embedded lab, proven by real traffic.

site.yml converges the lab (agent_network + host_firewall included); then every path of
the zones' rules (docs/networks.md#zones-and-the-host-firewall) is tried from the node a
person or an attacker would use. Each blocked path has a positive control: the same
listener answers an allowed peer (or the node itself), so "blocked" means the firewall,
not a dead listener. Probes are bash /dev/tcp connects with a 3 s timeout, run in
parallel inside the probing node:

    open     the listener answered (its first bytes are kept: the lab's stand-ins say
             "bai-lab <node> <port>", sshd says "SSH-2.0-...")
    refused  the host answered with a reset (reachable, nothing listening)
    noroute  the probing node has no route (segmentation)
    timeout  nothing came back: dropped by the firewall

Sessions are named fw-*; the module removes them. The last test restarts agent1's inner
engine (the brief asks for it): containers on agent1 without a restart policy stop.
"""

from __future__ import annotations

import re
import time

import pytest
from labtools import in_session, lab_agents, on_agent, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

IP = {
    "webserver": "10.210.1.10",
    "webserver_mgmt": "10.210.2.10",
    "manager": "10.210.2.11",
    "manager_compute": "10.210.3.11",
    "appproxy": "10.210.3.12",
    "agent1": "10.210.3.21",
    "agent2": "10.210.3.22",
}
AGENT_IPS = {"agent1": IP["agent1"], "agent2": IP["agent2"]}
SINGLE = "fw-one"
MULTI = "fw-multi"
TABLE = "bai_firewall"

PROBE = r"""
probe() {
  read1='{ timeout 1 head -c 40 <&3 || true; }'
  out=$(timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2 && $read1" 2>&1); rc=$?
  case "$rc:$out" in
    124:*) r=timeout ;;
    *"Network is unreachable"*|*"No route to host"*) r=noroute ;;
    *"Connection refused"*) r=refused ;;
    0:*) r="open $(printf %s "$out" | tr -c '[:print:]' ' ')" ;;
    *) r="error $rc $(printf %s "$out" | tr -c '[:print:]' ' ')" ;;
  esac
  echo "$1:$2 $r"
}
"""


def probe(node, targets: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """Connect from `node` to every (address, port) in parallel; {target: result}."""
    calls = " ".join(f"probe {a} {p} &" for a, p in targets)
    code, out = on_agent(node, "bash", "-c", PROBE + calls + " wait")
    assert code == 0, out
    results = {}
    for line in out.splitlines():
        target, _sep, result = line.partition(" ")
        address, _sep, port = target.rpartition(":")
        results[(address, int(port))] = result
    assert set(results) == set(targets), out
    return results


def node(docker_client, name):
    return docker_client.containers.get(f"bai-lab-{name}")


def drops(container) -> int:
    """Packets the input policy counter of the table has dropped on this node."""
    code, out = on_agent(container, "nft", "list", "chain", "inet", TABLE, "input")
    assert code == 0, out
    match = re.search(r"counter packets (\d+) bytes \d+ comment \"dropped by policy\"", out)
    assert match, out
    return int(match.group(1))


@pytest.fixture(scope="module")
def lab(docker_client):
    agents = lab_agents(docker_client)
    return {
        **agents,
        **{
            n: node(docker_client, n)
            for n in ("webserver", "manager", "appproxy", "user", "intruder")
        },
    }


@pytest.fixture(scope="module")
def converged(lab, run_playbook):
    """site.yml, then the two roles of this issue again: (first, second)."""
    first = run_playbook("site.yml")
    second = run_playbook("site.yml", "--tags", "agent_network,host_firewall")
    return first, second


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
        port = int(out.splitlines()[0].rsplit(":", 1)[1])
        assert 30000 <= port <= 31000
        yield agent, port
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": SINGLE})
        sweep(lab, SINGLE)


# --- converge -------------------------------------------------------------------------
def test_site_converges_and_the_firewall_reconverge_changes_nothing(converged):
    first, second = converged
    assert first.rc == 0, first
    assert second.rc == 0, second
    stats = second.result["stats"]
    assert {"webserver", "manager", "appproxy", "agent1", "agent2"} <= set(stats)
    assert {h: s["changed"] for h, s in stats.items() if s["changed"]} == {}, second


def test_every_component_has_the_table_and_docker_keeps_its_own(lab, converged):
    for name in ("webserver", "manager", "appproxy", "agent1", "agent2"):
        code, out = on_agent(lab[name], "nft", "list", "table", "inet", TABLE)
        assert code == 0, (name, out)
        assert "policy drop" in out and 'comment "bai host_firewall ' in out, (name, out)
    for name in ("manager", "agent1", "agent2"):
        code, out = on_agent(lab[name], "iptables", "-S", "DOCKER-USER")
        assert code == 0, (name, out)  # Docker's chains survive the firewall's loads


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


# --- the intruder (compute zone) --------------------------------------------------------
def test_intruder_is_dropped_on_every_agent_port(lab, converged):
    ports = [22, 6001, 6009, 2377, 7946]
    targets = [(ip, p) for ip in AGENT_IPS.values() for p in ports] + [
        (IP["manager_compute"], 2377)
    ]
    got = probe(lab["intruder"], targets)
    assert {t: r for t, r in got.items() if r != "timeout"} == {}, got
    # Positive controls: each listener is up (from inside the node) and answers peers.
    for agent in AGENT_IPS:
        local = probe(lab[agent], [("127.0.0.1", 22), ("127.0.0.1", 6001), ("127.0.0.1", 6009)])
        assert all(r.startswith("open") for r in local.values()), (agent, local)
    peer = probe(lab["agent2"], [(IP["agent1"], 7946)])
    assert peer[(IP["agent1"], 7946)].startswith("open"), peer
    mgr = probe(lab["agent1"], [(IP["manager_compute"], 2377)])
    assert mgr[(IP["manager_compute"], 2377)].startswith("open"), mgr


def test_intruder_udp_to_vxlan_and_gossip_is_dropped(lab, converged):
    before = drops(lab["agent1"])
    for port in (4789, 7946):
        code, out = on_agent(
            lab["intruder"],
            "bash",
            "-c",
            f"for i in 1 2 3; do echo x > /dev/udp/{IP['agent1']}/{port}; done",
        )
        assert code == 0, out
    time.sleep(0.5)
    assert drops(lab["agent1"]) - before >= 6  # each datagram hit the drop policy


def test_nmap_from_the_intruder_finds_no_open_port_on_the_agents(lab, converged):
    spec = "1-1024,2375-2377,4789,5000,6001,6009,7946,10200-10300,30000-31000"
    code, out = on_agent(
        lab["intruder"],
        "nmap",
        "-Pn",
        "-n",
        "-T5",
        "--max-retries",
        "0",
        "-p",
        spec,
        *AGENT_IPS.values(),
    )
    assert code == 0, out
    assert " open " not in out and "/open" not in out, out
    assert out.count("filtered") >= 2, out
    # Positive control: the same scan from the manager sees the agent RPC port open.
    code, ctl = on_agent(lab["manager"], "nmap", "-Pn", "-n", "-p", "6001", IP["agent1"])
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
    code, out = on_agent(lab["agent1"], "curl", "-sf", f"http://{IP['manager_compute']}:5000/v2/")
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


def test_multi_node_session_works_with_the_firewall_on(lab, converged, run_playbook):
    manager = lab["manager"]
    agents = {k: lab[k] for k in AGENT_IPS}
    sweep(agents, MULTI, manager)
    extra = {
        "session_name": MULTI,
        "session_size": 2,
        "session_mode": "multi-node",
        # 2 x 5g: no agent (8g offered) holds both, so the session spans agent1 and agent2.
        "session_resources": {"cpu": 0.5, "mem": "5g"},
    }
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        where = {c["host"]: c["agent"] for c in run.stats["bai_session"]["containers"]}
        assert where["main1"] != where["sub1"], where
        code, out = in_session(lab[where["main1"]], f"bai-{MULTI}-main1", "ssh sub1 hostname")
        assert (code, out) == (0, "sub1"), out
        code, out = in_session(lab[where["sub1"]], f"bai-{MULTI}-sub1", "ssh main1 hostname")
        assert (code, out) == (0, "main1"), out
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": MULTI})
        sweep(agents, MULTI, manager)


# --- persistence (last: restarts agent1's engine) ---------------------------------------
def test_firewall_survives_an_engine_restart(lab, converged):
    agent1 = lab["agent1"]
    _code, before = on_agent(agent1, "nft", "list", "table", "inet", TABLE)
    marker = re.search(r'comment "(bai host_firewall \w+)"', before)
    assert marker, before
    code, out = on_agent(agent1, "service", "docker", "restart")
    assert code == 0, out
    for _second in range(30):
        if on_agent(agent1, "docker", "info", "--format", "{{.ServerVersion}}")[0] == 0:
            break
        time.sleep(1)
    code, after = on_agent(agent1, "nft", "list", "table", "inet", TABLE)
    assert code == 0 and marker.group(1) in after, after
    blocked = probe(lab["intruder"], [(IP["agent1"], 6001)])
    assert blocked[(IP["agent1"], 6001)] == "timeout", blocked
    allowed = probe(lab["manager"], [(IP["agent1"], 6001)])
    assert allowed[(IP["agent1"], 6001)] == "open bai-lab agent1 6001", allowed
    code, out = on_agent(agent1, "iptables", "-S", "DOCKER-USER")
    assert code == 0, out
    # The boot hooks exist: SysV script + engine hook (the lab has no systemd).
    code, out = on_agent(
        agent1,
        "bash",
        "-c",
        "ls /etc/rcS.d | grep bai-firewall && grep -c bai-cluster /etc/default/docker",
    )
    assert code == 0, out
