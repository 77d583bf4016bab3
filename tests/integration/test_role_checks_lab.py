"""The checks roles/docker_swarm, roles/agent_network and roles/nfs_client claim in their
READMEs, run for real: each role on the lab's nodes and on a throwaway stand-in node.

The stand-in is one container of the lab's node image (bai/lab-node, its own Docker
engine, /var/lib/docker on a tmpfs) started by this module on the outer engine's default
bridge, outside the lab's zones, and removed at the end. Unlike the lab's nodes its
/proc/sys is writable (``systempaths=unconfined``; net.* sysctls are per network
namespace, so only the stand-in sees what the role writes). It plays:

- a node that already manages another swarm, one with a swarm port taken by another
  program, and one that cannot reach the manager's 2377/tcp, each next to the lab's
  real manager (docker_swarm must refuse them before anything changes);
- a host whose sysctls agent_network can set, and one with a Docker network inside a zone;
- a host where nfs_client writes /etc/fstab and mounts, with a stand-in for the kernel's
  NFS client. Not tested here: mounting a real export, hard/nofail against a server
  going away, a rerun over a live NFS mount (these machines' kernels have no NFS client
  and the lab has no NFS server).

A second, engine-less container with Docker's default capabilities and an empty
/sys/module stands in for a node that cannot make VXLAN links. Checks that need no
stand-in (MTU, encrypted overlays, pools, sysctl reports, nfs_client's check mode and
input checks) run on the lab's own nodes and must leave them as they were.

The roles run from small playbooks written here (only the role under test, on the hosts
given), with the lab's inventory plus one for the stand-in. Everything made carries the
label ai.backend.test=role-checks. Needs the lab up, converged by site.yml.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from labtools import on_agent, read_on

pytestmark = [pytest.mark.integration, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
TEST_LABEL = ("ai.backend.test", "role-checks")
NODE_IMAGE = "bai/lab-node:latest"
ZONES = {"public": "10.210.1.0/24", "management": "10.210.2.0/24", "compute": "10.210.3.0/24"}
ENGINE_NODES = ("manager", "agent1", "agent2")
SYSCTLS = {
    "net.ipv4.conf.all.rp_filter": "2",
    "net.ipv4.conf.default.rp_filter": "2",
    "net.ipv4.ip_forward": "1",
}
SYSCTL_FILE = "/etc/sysctl.d/60-bai-agent-network.conf"
PLAY = """\
- name: roles/{role} alone on {{{{ target }}}}
  hosts: "{{{{ target }}}}"
  gather_facts: false
  any_errors_fatal: true
  roles:
    - role: bai.cluster.{role}
"""


def sh(node, command: str) -> tuple[int, str]:
    return on_agent(node, "sh", "-c", command)


def must(node, command: str) -> str:
    code, out = sh(node, command)
    assert code == 0, (command, out)
    return out


def one_line(text: str) -> str:
    return " ".join(str(text).split())


@pytest.fixture(scope="module")
def plays(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("role-plays")
    for role in ("docker_swarm", "agent_network", "nfs_client"):
        (folder / f"{role}.yml").write_text(PLAY.format(role=role))
    return folder


@pytest.fixture(scope="module")
def engines(lab) -> dict:
    """The lab's nodes with a Docker engine in the swarm (ENGINE_NODES), by name: what
    these tests read and compare, not every node of the lab."""
    return {name: lab[name] for name in ENGINE_NODES}


def start_node(docker_client, name: str, *, engine: bool, tmpfs: tuple[str, ...] = ()):
    """A container of the lab's node image: with its own Docker engine and the lab's
    capability set plus a writable /proc/sys (engine=True), or with Docker's default,
    narrow capabilities. (The docker CLI: the SDK has no systempaths option.)"""
    argv = ["docker", "run", "-d", "--name", name, "--hostname", name, "--init"]
    argv += ["--label", "=".join(TEST_LABEL), "--tmpfs", "/run", "--tmpfs", "/run/lock"]
    for path in tmpfs:
        argv += ["--tmpfs", path]
    if engine:
        argv += ["-e", "LAB_DOCKERD=1", "--tmpfs", "/var/lib/docker"]
        argv += ["--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE"]
        for opt in ("seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"):
            argv += ["--security-opt", opt]
        argv += ["--device-cgroup-rule", "a *:* rwm"]
    made = subprocess.run(
        [*argv, NODE_IMAGE], capture_output=True, text=True, timeout=60, check=False
    )
    assert made.returncode == 0, made.stderr
    node = docker_client.containers.get(name)
    for _attempt in range(60 if engine else 0):
        if node.exec_run(["docker", "version"]).exit_code == 0:
            break
        node.reload()
        assert node.status == "running", node.logs()[-2000:]
        time.sleep(0.5)
    else:
        if engine:
            pytest.fail(f"the stand-in's engine did not start: {node.logs()[-2000:]!r}")
    node.reload()
    return node


@pytest.fixture(scope="module")
def standin(docker_client, engines, tmp_path_factory):
    """The stand-in node and an inventory that puts it into group agents (host name
    ``standin``) next to the lab's inventory."""
    name = f"bai-t-rc-{uuid.uuid4().hex[:8]}"
    node = start_node(docker_client, name, engine=True)
    address = node.attrs["NetworkSettings"]["IPAddress"]
    inventory = tmp_path_factory.mktemp("standin") / "standin.yml"
    host = {
        "ansible_connection": "community.docker.docker",
        "ansible_host": name,
        "ansible_python_interpreter": "/usr/bin/python3",
        "docker_swarm_advertise_addr": address,
    }
    inventory.write_text(
        yaml.safe_dump({"all": {"children": {"agents": {"hosts": {"standin": host}}}}})
    )
    try:
        yield {"node": node, "name": name, "address": address, "inventory": str(inventory)}
    finally:
        # Should a broken check have let the stand-in into the lab's swarm: out again.
        nodes = must(engines["manager"], "docker node ls --format '{{.ID}} {{.Hostname}}'")
        strays = [line.split()[0] for line in nodes.splitlines() if line.endswith(f" {name}")]
        if strays:
            sh(engines["manager"], f"docker node rm --force {' '.join(strays)}")
        node.remove(force=True)


def run_role(run_playbook, plays, role, target, *args, standin=None, **extra):
    inventories = ["-i", "inventories/lab"]
    if standin:
        inventories += ["-i", standin["inventory"]]
    return run_playbook(
        str(plays / f"{role}.yml"), *inventories, *args, extra_vars={"target": target, **extra}
    )


def task_results(run, name: str) -> dict[str, dict]:
    """host -> result of the task called ``role : name``."""
    for play in run.result.get("plays", []):
        for task in play.get("tasks", []):
            if task["task"]["name"].split(" : ", 1)[-1] == name:
                return task["hosts"]
    return {}


# --- docker_swarm ---------------------------------------------------------------------
def swarm_state(engines) -> dict:
    """The lab's swarm as the manager and the agents see it.

    Once (CI of 6ce8d54) the manager's ``docker node ls`` answered exit 0 with no line at
    all, not even its own node, between two reads that listed all five (the engines'
    logs of that run are gone, so why is not known). A swarm whose node list lacks the
    manager that answered is a failed read, not a state, so the list is read again, for
    up to 20 s, until it names every lab node the engines say is a member; a node the
    role under test added or removed still shows, as it would in any read."""
    members = {
        name: json.loads(must(node, "docker info --format '{{json .Swarm.NodeID}}'"))
        for name, node in engines.items()
    }
    deadline = time.monotonic() + 20
    while True:
        listed = must(
            engines["manager"], "docker node ls --format '{{.ID}} {{.Hostname}} {{.Status}}'"
        )
        nodes = sorted(listed.splitlines())
        ids = {line.split()[0] for line in nodes}
        if set(members.values()) <= ids or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return {
        "cluster": must(engines["manager"], "docker info --format '{{.Swarm.Cluster.ID}}'"),
        "nodes": nodes,
        "members": members,
    }


def standin_swarm(standin) -> dict:
    return json.loads(must(standin["node"], "docker info --format '{{json .Swarm}}'"))


def test_docker_swarm_refuses_a_node_that_manages_another_swarm(
    engines, standin, plays, run_playbook
):
    """README "Which swarm": a node active in some other swarm is refused, with the node,
    its managers and the two ways out; nothing changes on either swarm."""
    node, address = standin["node"], standin["address"]
    must(node, f"docker swarm init --advertise-addr {address} >/dev/null")
    try:
        foreign = standin_swarm(standin)
        assert foreign["ControlAvailable"] is True  # a manager of its own swarm
        before = swarm_state(engines)
        run = run_role(run_playbook, plays, "docker_swarm", "manager:standin", standin=standin)
        assert run.rc != 0, run
        (msg,) = run.failures
        assert msg.startswith(
            f"standin is in a different swarm: its node ID {foreign['NodeID']} is unknown "
            "to manager, which manages the cluster's swarm"
        ), msg
        assert f"(its managers: {address}:2377)" in msg
        assert "docker swarm leave --force on standin" in msg
        assert "docker_swarm_force_rejoin: true" in msg
        assert {h: run.changed(h) for h in ("manager", "standin")} == {"manager": 0, "standin": 0}
        # Both swarms as they were.
        assert swarm_state(engines) == before
        after = standin_swarm(standin)
        assert (after["LocalNodeState"], after["NodeID"], after["Cluster"]["ID"]) == (
            "active",
            foreign["NodeID"],
            foreign["Cluster"]["ID"],
        )
    finally:
        sh(node, "docker swarm leave --force")


def test_docker_swarm_refuses_a_node_whose_swarm_port_is_taken(
    engines, standin, plays, run_playbook
):
    """README step 2: on a node about to enter the swarm, no other program may hold
    7946/tcp+udp or 4789/udp; the message names the socket and the program."""
    node = standin["node"]
    assert standin_swarm(standin)["LocalNodeState"] == "inactive"
    pid = must(
        node,
        "nohup python3 /usr/local/lib/bai-lab/lab-listen.py 7946/udp >/dev/null 2>&1 & echo $!",
    ).strip()
    try:
        must(node, "for i in $(seq 50); do ss -Hlun | grep -q ':7946 ' && exit; sleep 0.1; done")
        before = swarm_state(engines)
        run = run_role(run_playbook, plays, "docker_swarm", "manager:standin", standin=standin)
        assert run.rc != 0, run
        (msg,) = run.failures
        assert msg.startswith(
            "standin cannot enter the swarm: port(s) already in use by another program: udp"
        ), msg
        assert "0.0.0.0:7946" in msg and '"python3"' in msg
        assert "Swarm needs 7946/tcp, 7946/udp, 4789/udp on this node" in msg
        assert "2377/tcp" not in msg  # a worker needs no management port
        assert standin_swarm(standin)["LocalNodeState"] == "inactive"
        assert swarm_state(engines) == before
    finally:
        sh(node, f"kill {pid}; docker swarm leave --force")  # (in case it tried to join)


def test_docker_swarm_says_when_the_manager_cannot_be_reached(
    engines, standin, plays, run_playbook
):
    """README step 2: before joining, a worker checks that the manager's 2377/tcp
    answers, so a firewall shows up as a message rather than a hanging join."""
    node = standin["node"]
    assert standin_swarm(standin)["LocalNodeState"] == "inactive"
    manager_ip = engines["manager"].attrs["NetworkSettings"]["Networks"]["bai-lab-compute"][
        "IPAddress"
    ]
    must(
        node,
        "nft add table inet bai_it && nft add chain inet bai_it out "
        "'{ type filter hook output priority 0; }' && "
        "nft add rule inet bai_it out tcp dport 2377 drop",
    )
    try:
        before = swarm_state(engines)
        run = run_role(run_playbook, plays, "docker_swarm", "manager:standin", standin=standin)
        assert run.rc != 0, run
        (msg,) = run.failures
        assert msg.startswith(f"standin cannot reach manager at {manager_ip}:2377/tcp"), msg
        assert "Open 2377/tcp on the manager, and 7946/tcp+udp and 4789/udp" in msg
        assert standin_swarm(standin)["LocalNodeState"] == "inactive"
        assert swarm_state(engines) == before
    finally:
        # Stop a join a broken check would have left retrying, before the path opens.
        sh(node, "docker swarm leave --force; nft delete table inet bai_it")


def test_docker_swarm_refuses_a_node_that_cannot_make_vxlan_links(
    docker_client, engines, plays, run_playbook, tmp_path
):
    """README step 2: VXLAN is probed (/sys/module/vxlan, else a VXLAN link in a
    throwaway namespace). Stand-in for a kernel without VXLAN: a container whose
    /sys/module is an empty tmpfs and which may not create namespaces (Docker's default
    capabilities). The kernel here has VXLAN, so the probe's other half is not exercised."""
    name = f"bai-t-novx-{uuid.uuid4().hex[:8]}"
    node = start_node(docker_client, name, engine=False, tmpfs=("/sys/module",))
    try:
        inventory = tmp_path / "novx.yml"
        host = {
            "ansible_connection": "community.docker.docker",
            "ansible_host": name,
            "ansible_python_interpreter": "/usr/bin/python3",
            "docker_swarm_advertise_addr": node.attrs["NetworkSettings"]["IPAddress"],
        }
        inventory.write_text(
            yaml.safe_dump({"all": {"children": {"agents": {"hosts": {"novx": host}}}}})
        )
        before = swarm_state(engines)
        run = run_role(
            run_playbook,
            plays,
            "docker_swarm",
            "manager:novx",
            standin={"inventory": str(inventory)},
        )
        assert run.rc != 0, run
        (msg,) = run.failures
        assert msg.startswith("novx cannot create VXLAN interfaces ("), msg
        assert "so Docker overlay networks cannot work there" in msg
        # Positive control: the manager passed the same probe.
        probe = task_results(run, "Check that the kernel has VXLAN (overlay networks)")
        assert probe["manager"]["rc"] == 0 and probe["novx"]["rc"] != 0, probe
        assert swarm_state(engines) == before
    finally:
        node.remove(force=True)


def test_docker_swarm_refuses_an_overlay_mtu_the_compute_network_cannot_carry(
    engines, plays, run_playbook
):
    """README step 2: the overlay MTU plus 50 bytes of VXLAN must fit each node's compute
    interface; 1451 on 1500-byte links is refused on every node, with the value that fits.
    Out-of-range values are refused before any host is looked at."""
    mtus = {}
    for name, node in engines.items():
        dev = must(node, "ip -o -4 addr show | awk '$4 ~ /^10[.]210[.]3[.]/ {print $2}'").strip()
        mtus[name] = int(must(node, f"cat /sys/class/net/{dev}/mtu"))
    before = swarm_state(engines)
    run = run_role(
        run_playbook, plays, "docker_swarm", "manager:agents", docker_swarm_overlay_mtu=1451
    )
    assert run.rc != 0, run
    expected = {
        name: f"{name}'s compute interface has MTU {mtu}, too small for overlays of MTU 1451 "
        f"plus 50 bytes of VXLAN: packets would be dropped. Set docker_swarm_overlay_mtu to "
        f"{mtu - 50}"
        for name, mtu in mtus.items()
        if mtu < 1501
    }
    assert sorted(expected) == sorted(ENGINE_NODES), mtus  # the lab's links are 1500 bytes
    for name, text in expected.items():
        assert any(msg.startswith(text) for msg in run.failures), (name, run.failures)
    out_of_range = run_role(
        run_playbook, plays, "docker_swarm", "manager:agents", docker_swarm_overlay_mtu=9000
    )
    assert out_of_range.rc != 0, out_of_range
    assert out_of_range.failures == [
        "docker_swarm_overlay_mtu 9000 is out of range: an overlay MTU lies between 1280 and "
        "8950 (the underlay MTU minus 50 bytes of VXLAN), or null for Docker's default."
    ]
    assert swarm_state(engines) == before


ESP_PROBE = (
    "unshare --net ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x4242 "
    "mode transport aead 'rfc4106(gcm(aes))' 0x0102030405060708090a0b0c0d0e0f1011121314 128"
)


def test_docker_swarm_refuses_encrypted_overlays_where_the_kernel_has_no_esp(
    engines, plays, run_playbook
):
    """README step 2 and docker_swarm_overlay_encrypted: where the kernel cannot make an
    ESP state with Docker's AEAD (this machine's kernel: "Requested AEAD algorithm not
    found"), true is refused on every such node before anything changes."""
    lacking = sorted(name for name, node in engines.items() if sh(node, ESP_PROBE)[0] != 0)
    before = swarm_state(engines)
    run = run_role(
        run_playbook, plays, "docker_swarm", "manager:agents", docker_swarm_overlay_encrypted=True
    )
    refused = sorted(
        msg.split("'s kernel cannot make IPsec ESP states", 1)[0].rsplit(" ", 1)[-1]
        for msg in run.failures
        if msg.startswith("docker_swarm_overlay_encrypted is true, but ")
    )
    assert refused == lacking, (lacking, run.failures)
    assert (run.rc != 0) == bool(lacking), run
    assert all(run.changed(name) == 0 for name in engines)
    assert swarm_state(engines) == before


def test_docker_swarm_partial_run_needs_the_first_manager_and_changes_nothing(
    engines, plays, run_playbook
):
    """A run limited to some members (--limit manager,agent1) converges them and changes
    nothing on a converged lab (it used to fail on the members left out); without the
    first manager it stops with a message rather than calling agent1 a stranger."""
    before = swarm_state(engines)
    partial = run_role(
        run_playbook, plays, "docker_swarm", "manager:agents", "--limit", "manager,agent1"
    )
    assert partial.rc == 0, partial
    assert (partial.changed("manager"), partial.changed("agent1")) == (0, 0), partial
    alone = run_role(run_playbook, plays, "docker_swarm", "manager:agents", "--limit", "agent1")
    assert alone.rc != 0, alone
    assert alone.failures == [
        "docker_swarm needs the first manager, manager, in the play: it tells which nodes "
        "belong to the swarm and hands out the join tokens. Include it in --limit, e.g. "
        "--limit manager,agent1."
    ]
    assert swarm_state(engines) == before


# --- agent_network --------------------------------------------------------------------
def live_sysctls(node) -> dict[str, str]:
    paths = " ".join(f"/proc/sys/{key.replace('.', '/')}" for key in SYSCTLS)
    values = read_on(node, f"cat {paths}").split()
    assert len(values) == len(SYSCTLS), values
    return dict(zip(SYSCTLS, values))


def expected_sysctl_file() -> list[str]:
    return [f"{key} = {value}" for key, value in sorted(SYSCTLS.items())]


def sysctl_file(node, path: str = SYSCTL_FILE) -> list[str]:
    return [line for line in read_on(node, f"cat {path}").splitlines() if not line.startswith("#")]


def test_agent_network_persists_the_sysctls_and_reports_what_proc_sys_refuses(
    engines, plays, run_playbook
):
    """On the lab (read-only /proc/sys, agent_network_sysctl_strict false): the file holds
    the three settings, the report names exactly the keys whose live value differs,
    with the live values /proc/sys shows; ip_forward is already 1 (the outer engine's).
    What cannot be tested here: that the role writes a live value on a lab node (see the
    stand-in test below, where /proc/sys is writable)."""
    run = run_role(run_playbook, plays, "agent_network", "manager:agents")
    assert run.rc == 0, run
    report = task_results(
        run, "Report the sysctls that cannot be applied here (read-only /proc/sys)"
    )
    for name, node in engines.items():
        assert run.changed(name) == 0, run
        assert sysctl_file(node) == expected_sysctl_file(), name
        assert must(node, "awk '$2 == \"/proc/sys\" {print $4}' /proc/mounts").startswith("ro"), (
            name
        )
        live = live_sysctls(node)
        assert live["net.ipv4.ip_forward"] == "1", (name, live)
        stuck = {key: have for key, have in live.items() if have != SYSCTLS[key]}
        if stuck:
            assert one_line(report[name]["msg"]) == one_line(
                f"{name}: /proc/sys is read-only (a container, e.g. the lab's nodes), so "
                f"{', '.join(stuck)} keep their live values ({', '.join(stuck.values())} "
                f"instead of {', '.join(SYSCTLS[k] for k in stuck)}). They are persisted in "
                f"{SYSCTL_FILE}; set them on the outer host (or docker run --sysctl)."
            )
        else:
            assert report[name].get("skipped"), report[name]
    applied = task_results(run, "Apply the sysctls that differ")
    assert all(not res.get("results") for res in applied.values()), applied

    # Strict mode fails on exactly those keys, and still changes nothing.
    strict = run_role(
        run_playbook, plays, "agent_network", "manager:agents", agent_network_sysctl_strict=True
    )
    differing = {
        name: [k for k, v in live_sysctls(node).items() if v != SYSCTLS[k]]
        for name, node in engines.items()
    }
    if any(differing.values()):
        assert strict.rc != 0, strict
        for name, keys in differing.items():
            if keys:
                assert (
                    f"{', '.join(keys)} cannot be set on {name} (read-only or missing)."
                    in one_line(" ".join(strict.failures))
                ), (name, strict.failures)
    else:
        assert strict.rc == 0, strict
    assert all(strict.changed(name) == 0 for name in engines)


def test_agent_network_applies_the_sysctls_live_where_proc_sys_is_writable(
    standin, plays, run_playbook
):
    """On the stand-in (writable /proc/sys, strict): check mode shows the change and
    applies nothing; a run sets the live values and writes the file; a rerun changes
    nothing."""
    node = standin["node"]
    must(
        node,
        f"rm -f {SYSCTL_FILE}; sysctl -qw net.ipv4.conf.all.rp_filter=1 "
        "net.ipv4.conf.default.rp_filter=0 net.ipv4.ip_forward=0",
    )
    old = {
        "net.ipv4.conf.all.rp_filter": "1",
        "net.ipv4.conf.default.rp_filter": "0",
        "net.ipv4.ip_forward": "0",
    }
    assert live_sysctls(node) == old
    args = dict(standin=standin, agent_network_sysctl_strict=True)
    check = run_role(run_playbook, plays, "agent_network", "standin", "--check", "--diff", **args)
    assert check.rc == 0, check
    assert check.changed("standin") > 0, check
    assert live_sysctls(node) == old
    assert sh(node, f"test -e {SYSCTL_FILE}")[0] != 0, "check mode wrote the file"

    run = run_role(run_playbook, plays, "agent_network", "standin", **args)
    assert run.rc == 0, run
    assert live_sysctls(node) == SYSCTLS
    assert sysctl_file(node) == expected_sysctl_file()
    applied = task_results(run, "Apply the sysctls that differ")["standin"]["results"]
    assert sorted(r["item"]["key"] for r in applied) == sorted(SYSCTLS)

    again = run_role(run_playbook, plays, "agent_network", "standin", **args)
    assert again.rc == 0, again
    assert again.changed("standin") == 0, again
    assert live_sysctls(node) == SYSCTLS


def test_agent_network_refuses_colliding_pools_before_any_change(engines, plays, run_playbook):
    """README: the pools are checked on the controller before any change; the message
    names the pool and the zone (or the other pool). The sysctl file is pointed at a
    new path for this run: had anything run past the check, that file would exist."""
    probe_file = f"/etc/sysctl.d/61-bai-it-{uuid.uuid4().hex[:6]}.conf"
    try:
        run = run_role(
            run_playbook,
            plays,
            "agent_network",
            "manager:agents",
            bai_session_subnet_pool="10.210.0.0/16",
            docker_swarm_default_addr_pool=["10.200.0.0/16"],
            agent_network_sysctl_file=probe_file,
        )
        assert run.rc != 0, run
        (msg,) = run.failures
        assert msg.startswith("Address pools collide, nothing was changed: "), msg
        for problem in [
            *(f"sessions[0] (10.210.0.0/16) overlaps {z} ({c})" for z, c in ZONES.items()),
            "engine[0] (10.200.0.0/14) overlaps swarm[0] (10.200.0.0/16)",
        ]:
            assert problem in msg, (problem, msg)
        assert "bai_session_subnet_pool" in msg and "docker_swarm_default_addr_pool" in msg
        for name, node in engines.items():
            assert run.changed(name) == 0
            assert sh(node, f"test -e {probe_file}")[0] != 0, f"{probe_file} was written on {name}"
    finally:
        for node in engines.values():
            sh(node, f"rm -f {probe_file}")


def test_agent_network_refuses_a_docker_network_inside_a_zone(standin, plays, run_playbook):
    """README: where an engine runs, its existing networks are checked against the zones.
    On the stand-in's engine, a bridge in the public zone's range is refused by name."""
    node = standin["node"]
    net = "bai-it-zone"
    must(node, f"docker network create --subnet 10.210.1.0/25 {net} >/dev/null")
    probe_file = "/etc/sysctl.d/61-bai-it-zone.conf"
    try:
        run = run_role(
            run_playbook,
            plays,
            "agent_network",
            "standin",
            standin=standin,
            agent_network_sysctl_file=probe_file,
        )
        assert run.rc != 0, run
        (msg,) = run.failures
        assert msg.startswith(
            f"Docker network(s) on standin overlap a zone: {net} (10.210.1.0/25) overlaps "
            "public (10.210.1.0/24)."
        ), msg
        assert "docker network rm NAME" in msg
        assert sh(node, f"test -e {probe_file}")[0] != 0
    finally:
        sh(node, f"docker network rm {net}")


# --- nfs_client -----------------------------------------------------------------------
EXPORT = "nfs1.example:/export/bai-data"
NFS_OPTIONS = "rw,hard,noatime,nofail,_netdev"


def agents(engines):
    return {k: v for k, v in engines.items() if k.startswith("agent")}


def is_installed(node, package: str = "nfs-common") -> bool:
    return sh(node, f"dpkg-query -W -f '${{db:Status-Status}}' {package}")[1] == "installed"


def test_nfs_client_check_mode_shows_the_mount_and_changes_nothing(engines, plays, run_playbook):
    """Check mode on the lab's agents with an export set: the mount the role would make
    (source, mount point, type, options, the fstab it would record it in) and the
    package it would install; /etc/fstab and the file system stay as they were.
    The mount itself needs a kernel with NFS, which this machine lacks."""
    path = f"/srv/bai-nfs-it-{uuid.uuid4().hex[:6]}"
    before = {name: must(node, "cat /etc/fstab") for name, node in agents(engines).items()}
    installed = {name: is_installed(node) for name, node in agents(engines).items()}
    run = run_role(
        run_playbook,
        plays,
        "nfs_client",
        "agents",
        "--check",
        nfs_client_export=EXPORT,
        nfs_client_path=path,
    )
    assert run.rc == 0, run
    mounts = task_results(run, "Mount the export (and record it in /etc/fstab)")
    would_install = task_results(run, "Report the packages check mode would install")
    for name, node in agents(engines).items():
        res = mounts[name]
        assert res["changed"] is True
        assert (res["src"], res["name"], res["fstype"], res["opts"], res["fstab"]) == (
            EXPORT,
            path,
            "nfs",
            NFS_OPTIONS,
            "/etc/fstab",
        )
        if installed[name]:
            assert would_install[name].get("skipped"), would_install[name]
        else:
            assert would_install[name]["msg"] == "Check mode: would install nfs-common."
        assert must(node, "cat /etc/fstab") == before[name]
        assert sh(node, f"test -e {path}")[0] != 0, f"check mode created {path} on {name}"
        assert is_installed(node) == installed[name]


@pytest.mark.parametrize(
    ("export", "path"),
    [
        pytest.param("nfs1.example/export/bai-data", None, id="export-without-colon"),
        pytest.param(EXPORT, "srv/relative", id="relative-mount-point"),
    ],
)
def test_nfs_client_refuses_bad_input_before_touching_a_host(
    engines, plays, run_playbook, export, path
):
    mount_point = path or f"/srv/bai-nfs-it-{uuid.uuid4().hex[:6]}"
    before = {name: must(node, "cat /etc/fstab") for name, node in agents(engines).items()}
    run = run_role(
        run_playbook,
        plays,
        "nfs_client",
        "agents",
        nfs_client_export=export,
        nfs_client_path=mount_point,
    )
    assert run.rc != 0, run
    message = (
        f"nfs_client_export {json.dumps(export)} must look like server:/path (e.g. "
        f"nfs1.example:/export/bai-data) and nfs_client_path {json.dumps(mount_point)} must "
        f"be an absolute path. Fix them in {REPO}/inventories/lab/group_vars/agents.yml."
    )
    assert run.failures == [message, message]
    for name, node in agents(engines).items():
        assert run.changed(name) == 0
        assert must(node, "cat /etc/fstab") == before[name]
        assert sh(node, f"test -e {mount_point}")[0] != 0


# The export's root as a server would hand it out for the sessions: owned by work
# (UID 1000, see roles/nfs_client/README.md), group-writable.
EXPORT_ROOT = "1000 1000 775"
MOUNT_HELPER = """#!/bin/sh
# Test stand-in for the NFS client's mount helper (this kernel has no NFS): records its
# arguments, then mounts a small tmpfs where the export would be.
echo "$*" >> /run/mount.nfs.calls
exec mount -t tmpfs -o size=1m,uid=1000,gid=1000,mode=0775 bai-nfs-standin "$2"
"""


def test_nfs_client_records_the_export_in_fstab_and_mounts_it(standin, plays, run_playbook):
    """A real run on the stand-in, where /sbin/mount.nfs is a helper that mounts a tmpfs
    instead of the export (nfs_client_packages: [mount], already installed, so apt is
    not needed): /etc/fstab gets exactly one line with the export, the type and the
    options, mount(8) hands the helper those options, and a rerun changes nothing, not
    even the owner or mode of the mounted export's root. Not tested here: a real NFS
    server and client (see test_nfs_client_mounts_a_real_export)."""
    node = standin["node"]
    path = "/srv/bai-nfs"
    must(node, f"cat > /sbin/mount.nfs <<'EOF'\n{MOUNT_HELPER}EOF\nchmod 755 /sbin/mount.nfs")
    args = dict(
        standin=standin,
        nfs_client_export=EXPORT,
        nfs_client_path=path,
        nfs_client_packages=["mount"],
    )
    try:
        run = run_role(run_playbook, plays, "nfs_client", "standin", **args)
        assert run.rc == 0, run
        lines = [line.split() for line in must(node, "cat /etc/fstab").splitlines()]
        assert [line for line in lines if path in line] == [
            [EXPORT, path, "nfs", NFS_OPTIONS, "0", "0"]
        ]
        assert must(node, f"stat -c '%u %g %a' {path}").strip() == EXPORT_ROOT
        calls = must(node, "cat /run/mount.nfs.calls").splitlines()
        assert len(calls) == 1 and calls[0].startswith(f"{EXPORT} {path} "), calls
        assert set(NFS_OPTIONS.split(",")) - {"nofail", "_netdev"} <= set(
            calls[0].split("-o ", 1)[1].split()[0].split(",")
        ), calls
        assert must(node, f"findmnt -n -o SOURCE {path}").strip() == "bai-nfs-standin"

        again = run_role(run_playbook, plays, "nfs_client", "standin", **args)
        assert again.rc == 0, again
        assert again.changed("standin") == 0, again
        assert len(must(node, "cat /run/mount.nfs.calls").splitlines()) == 1
        assert must(node, f"stat -c '%u %g %a' {path}").strip() == EXPORT_ROOT
    finally:
        sh(node, f"umount {path}; rm -f /sbin/mount.nfs /run/mount.nfs.calls")
        sh(node, f"sed -i '\\# {path} #d' /etc/fstab")
