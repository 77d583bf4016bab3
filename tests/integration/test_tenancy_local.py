"""Sessions safe for many tenants, on this machine's engine (``inventories/local``, an
engine site.yml does not manage: icc on, no host firewall).

Real containers and the real playbooks: the mount policy (refusals leave nothing behind),
the confinement Docker applies (inspect, and what a process inside can do), sshd as an
auditor sees it (ssh-audit) and its per-source limit, and probes between sessions that
find nothing open. No probe leaves this machine: every address tried is a container's or
this host's own.
"""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_session_local import (
    DATA_ROOT,
    container,
    create,
    ensure_dir,
    labelled,
    run_in,
    session,
    sweep,
)

pytestmark = pytest.mark.integration

# Docker's default set less NET_RAW, MKNOD, FSETID, SETFCAP, SETPCAP and NET_BIND_SERVICE.
KEPT_CAPS = {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "SYS_CHROOT", "KILL"}
KEPT_CAPS |= {"AUDIT_WRITE"}
CAP_NET_RAW = 13


@pytest.fixture(scope="module")
def data():
    """A data folder under the data root, links in it that lead out, a socket in it."""
    base = Path(tempfile.mkdtemp(prefix="it-ten-", dir=ensure_dir(DATA_ROOT)))
    base.chmod(0o777)
    (base / "sets").mkdir()
    (base / "sets" / "README").write_text("read me\n")
    (base / "out").symlink_to("/etc")
    (base / "up").symlink_to("../../..")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(base / "sock"))
    yield base
    sock.close()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def ta(run_playbook, docker_client, data):
    """Size 1, with a read-write and a read-only mount."""
    mounts = [
        {"src": str(data), "dst": "/home/work/data"},
        {"src": str(data / "sets"), "dst": "/data/sets", "readonly": True},
    ]
    with session(run_playbook, docker_client, "it-ta", size=1, mounts=mounts) as run:
        yield run


@pytest.fixture(scope="module")
def tb(run_playbook, docker_client):
    with session(run_playbook, docker_client, "it-tb", size=1) as run:
        yield run


@pytest.fixture(scope="module")
def tc(run_playbook, docker_client):
    with session(run_playbook, docker_client, "it-tc", size=2) as run:
        yield run


# --- 1. mount policy ------------------------------------------------------------------
def _matrix(data: Path) -> list[tuple[str, str, str]]:
    return [
        ("root", "/", "the agent's whole file system"),
        ("docker-socket", "/var/run/docker.sock", "system path of the agent"),
        ("etc", "/etc", "system path of the agent (overlaps /etc)"),
        ("var-lib-docker", "/var/lib/docker", "system path of the agent"),
        ("outside", "/tmp", "outside the agent's data roots"),
        ("link-out", str(data / "out"), "resolves to /etc"),
        ("link-up", str(data / "up"), "resolves to /"),
        ("socket", str(data / "sock"), "is a socket"),
    ]


MATRIX_IDS = [row[0] for row in _matrix(Path("/x"))]


@pytest.mark.parametrize("case", MATRIX_IDS)
def test_mount_sources_outside_the_data_roots_are_refused_and_nothing_is_made(
    run_playbook, docker_client, data, case
):
    _id, src, message = next(row for row in _matrix(data) if row[0] == case)
    sweep(docker_client, "it-mnt")
    run = create(run_playbook, "it-mnt", size=1, mounts=[{"src": src, "dst": "/home/work/x"}])
    assert run.rc != 0
    text = " ".join(run.failures)
    assert message in text, run
    if case != "socket":
        assert f"(bai_data_roots: {DATA_ROOT})" in text, run
    assert labelled(docker_client, "it-mnt") == ([], [])
    # Not even a network without the label. (Only this session's: the lab's tests run
    # beside this module and make and remove networks of their own on this engine.)
    assert [n.name for n in docker_client.networks.list() if "it-mnt" in n.name] == []


def test_a_mount_over_a_system_folder_of_the_container_is_refused(run_playbook, docker_client):
    run = create(run_playbook, "it-mnt", size=1, mounts=[{"src": DATA_ROOT, "dst": "/etc"}])
    assert run.rc != 0
    assert any("mounts[0].dst: /etc would cover /etc" in f for f in run.failures), run
    assert labelled(docker_client, "it-mnt") == ([], [])


def test_good_mounts_are_made_and_readonly_is_honoured(ta, docker_client, data):
    main1 = container(docker_client, "it-ta", "main1")
    mounts = {m["Destination"]: m for m in main1.attrs["Mounts"]}
    assert (mounts["/home/work/data"]["Source"], mounts["/home/work/data"]["RW"]) == (
        str(data),
        True,
    )
    assert (mounts["/data/sets"]["Source"], mounts["/data/sets"]["RW"]) == (
        str(data / "sets"),
        False,
    )
    assert run_in(main1, "echo hi > ~/data/w && cat ~/data/w") == (0, "hi")
    code, out = run_in(main1, "cat /data/sets/README && touch /data/sets/x")
    assert code != 0 and "read me" in out and "Read-only file system" in out, out
    # Root in the container (docker exec's default user) cannot write it either.
    assert run_in(main1, "touch /data/sets/y", user="root")[0] != 0


# --- 2. hardened containers -------------------------------------------------------------
@pytest.mark.parametrize("name", ["it-ta", "it-tc"])
def test_containers_are_confined(ta, tc, docker_client, name):
    """CIS Docker Benchmark 5.3 (capabilities), 5.25 (no-new-privileges), 5.28 (PIDs
    limit), 5.13/5.14 (published port bound to one address): read back from Docker."""
    for ctr in labelled(docker_client, name)[0]:
        host = ctr.attrs["HostConfig"]
        assert host["CapDrop"] == ["ALL"], ctr.name
        assert set(host["CapAdd"]) == KEPT_CAPS, ctr.name
        assert host["SecurityOpt"] == ["no-new-privileges:true"], ctr.name
        assert host["PidsLimit"] == 16384, ctr.name
        assert not host["Privileged"], ctr.name
        bound = [b["HostIp"] for b in (host["PortBindings"] or {}).get("2200/tcp") or []]
        # inventories/local has neither zones nor an app proxy: loopback only.
        assert bound == (["127.0.0.1"] if ctr.name.endswith("-main1") else []), ctr.name


def test_inside_a_container_privileges_cannot_be_gained(ta, docker_client):
    main1 = container(docker_client, "it-ta", "main1")
    code, out = run_in(main1, "grep -E '^(NoNewPrivs|CapBnd)' /proc/self/status")
    fields = dict(line.split(":\t") for line in out.splitlines())
    assert fields["NoNewPrivs"] == "1"
    assert not int(fields["CapBnd"], 16) & (1 << CAP_NET_RAW), "NET_RAW is in the bounding set"
    # No sudo, and no setuid or setgid file that could matter if the flag were lost.
    assert run_in(main1, "command -v sudo")[0] != 0
    code, out = run_in(main1, "find / -xdev -perm /6000 -type f 2>/dev/null", user="root")
    assert out == "", out
    # Raw sockets are refused even to root.
    probe = "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"
    code, out = run_in(main1, f"python3 -c '{probe}'", user="root")
    assert code != 0 and "Operation not permitted" in out, out
    # The kernel holds the PIDs limit (the cgroup's pids.max).
    code, out = run_in(
        main1, "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max"
    )
    assert out == "16384", out


# --- 3. sshd --------------------------------------------------------------------------
def _ssh_port(docker_client, name) -> int:
    main1 = container(docker_client, name, "main1")
    return int(main1.attrs["NetworkSettings"]["Ports"]["2200/tcp"][0]["HostPort"])


def test_ssh_audit_finds_no_failure(ta, docker_client):
    port = _ssh_port(docker_client, "it-ta")
    audit = Path(sys.executable).with_name("ssh-audit")
    done = subprocess.run(
        [str(audit), "--no-colors", "--skip-rate-test", "-p", str(port), "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(done.stdout)
    # Exit codes: 0 good, 2 warnings only (curve25519 is kept first on purpose: the
    # post-quantum hybrid costs ~10x the CPU per login), 3 failures.
    assert done.returncode in (0, 2), done.stdout + done.stderr
    assert "[fail]" not in done.stdout, done.stdout
    kex = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("(kex)")]
    assert kex[0] == "curve25519-sha256", kex
    assert "kex-strict-s-v00@openssh.com" in kex  # Terrapin counter-measure


def test_sshd_settings_forwarding_and_login_limits(ta, docker_client):
    main1 = container(docker_client, "it-ta", "main1")
    code, out = run_in(main1, "/usr/sbin/sshd -T", user="root")
    assert code == 0, out
    got = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert got["x11forwarding"] == "no"
    assert got["allowagentforwarding"] == "no"
    assert got["allowtcpforwarding"] == "local"
    assert got["permittunnel"] == "no"
    assert int(got["logingracetime"]) <= 30
    assert got["persourcemaxstartups"] == "10"


def test_one_source_gets_at_most_ten_unauthenticated_connections(ta, docker_client):
    port = _ssh_port(docker_client, "it-ta")

    def banner(_attempt):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            time.sleep(1.0)  # hold the connection open, unauthenticated
            try:
                return conn.recv(64).startswith(b"SSH-2.0-")
            except OSError:
                return False

    with ThreadPoolExecutor(max_workers=16) as pool:
        answered = sum(pool.map(banner, range(16)))
    assert 1 <= answered <= 10, f"{answered} of 16 parallel connections got a banner"


def test_local_port_forwarding_through_main1_still_works(ta, docker_client):
    """ssh -L, as people reach their apps through main1 (docs/ssh.md)."""
    main1 = container(docker_client, "it-ta", "main1")
    # Forward a local port to main1's own sshd and read its banner through the tunnel.
    script = (
        "ssh -f -N -o ExitOnForwardFailure=yes -L 127.0.0.1:8124:127.0.0.1:2200 main1; "
        "exec 3<>/dev/tcp/127.0.0.1/8124; head -c 8 <&3; exec 3<&-; "
        "pkill -u work -x ssh || true"
    )
    code, out = run_in(main1, script)
    assert code == 0 and out.startswith("SSH-2.0-"), out


# --- 4. isolation between sessions ----------------------------------------------------
def _addresses(ctr) -> list[str]:
    ctr.reload()
    return [n["IPAddress"] for n in ctr.attrs["NetworkSettings"]["Networks"].values()]


def _gateways(ctr) -> list[str]:
    return [n["Gateway"] for n in ctr.attrs["NetworkSettings"]["Networks"].values()]


def _bridge_gateway(docker_client) -> str:
    """The default bridge's address on this host. Docker's IPAM config does not always
    list it (only the subnet, on an engine that found docker0 already up): then docker0's."""
    config = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return config["Gateway"]
    ip = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", "docker0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return ip.stdout.split()[3].split("/")[0]


def _probe(ctr, targets: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """What a TCP connect from ``ctr`` to each (address, port) gets (2 s each, in
    parallel): ``open``, ``timeout`` (dropped: timeout's own exit code, 124) or
    ``refused`` (any other failure: something answered)."""
    checks = " ".join(f"{a}:{p}" for a, p in targets)
    script = (
        f"for t in {checks}; do (a=${{t%:*}}; p=${{t#*:}}; "
        'timeout 2 bash -c "exec 3<>/dev/tcp/$a/$p" 2>/dev/null; rc=$?; '
        'case $rc in 0) echo "open $t";; 124) echo "timeout $t";; *) echo "refused $t";; esac'
        ") & done; wait"
    )
    _code, out = run_in(ctr, script)
    found = {}
    for line in out.splitlines():
        verdict, target = line.split()
        addr, port = target.rsplit(":", 1)
        found[(addr, int(port))] = verdict
    assert set(found) == set(targets), out
    return found


def test_sessions_reach_nothing_of_each_other(ta, tb, tc, docker_client):
    """Size 1 and size 2 sessions on an engine with icc on: a connect from a container of
    one session to a container of another is dropped (it times out: a refusal would mean
    the packet got there), and none reaches another session's published sshd on any of
    this host's addresses (there the host itself may refuse). Each is tried three times.
    The positive controls, in the same probes, prove the probe itself works."""
    a, b = container(docker_client, "it-ta", "main1"), container(docker_client, "it-tb", "main1")
    c1, c2 = container(docker_client, "it-tc", "main1"), container(docker_client, "it-tc", "sub1")
    host_addresses = {"127.0.0.1"} | {g for ctr in (a, b, c1) for g in _gateways(ctr)}
    host_addresses.add(_bridge_gateway(docker_client))
    published = {name: _ssh_port(docker_client, name) for name in ("it-ta", "it-tb", "it-tc")}
    sibling = (_addresses(c2)[0], 2200)
    for _attempt in range(3):
        for src, own in ((a, "it-ta"), (b, "it-tb"), (c1, "it-tc")):
            others = [ctr for ctr in (a, b, c1, c2) if not ctr.name.startswith(f"bai-{own}-")]
            foreign = [(addr, 2200) for ctr in others for addr in _addresses(ctr)]
            hosts = [
                (addr, port) for addr in host_addresses for n, port in published.items() if n != own
            ]
            found = _probe(src, foreign + hosts + ([sibling] if src is c1 else []))
            answered = {t: found[t] for t in foreign if found[t] != "timeout"}
            assert answered == {}, f"{src.name} gets answers from {answered}"
            reached = [t for t in hosts if found[t] == "open"]
            assert reached == [], f"{src.name} reaches {reached}"
            if src is c1:
                assert found[sibling] == "open", found
    with socket.create_connection(("127.0.0.1", published["it-tb"]), timeout=5):
        pass


# --- 6. clear errors ------------------------------------------------------------------
def test_an_environment_too_large_is_refused_before_anything_is_made(run_playbook, docker_client):
    run = create(run_playbook, "it-env", size=1, env={"BIG": "x" * 40000})
    assert run.rc != 0
    assert any("env.BIG: value of 40000 bytes; at most 32768" in f for f in run.failures), run
    assert labelled(docker_client, "it-env") == ([], [])


def test_a_broken_ld_preload_does_not_break_the_session(run_playbook, docker_client):
    """ld.so warns on every process about a preload it cannot open; the health gate
    reads what its checks printed on stdout only, so the session is still made."""
    with session(
        run_playbook, docker_client, "it-pre", size=2, env={"LD_PRELOAD": "/nonexistent.so"}
    ) as run:
        assert run.rc == 0
        code, out = run_in(container(docker_client, "it-pre", "main1"), "ssh sub1 hostname")
        assert code == 0 and "sub1" in out and "nonexistent.so" in out, out


def test_a_failing_ssh_login_shows_what_the_container_printed(run_playbook, docker_client):
    """An image whose sshd refuses user work: the health gate fails the create, names the
    host and quotes ssh's own words, and everything is removed."""
    tag = "bai/it-nossh:latest"
    docker_client.images.build(
        fileobj=io.BytesIO(
            b"FROM bai/session:latest\n"
            b"RUN echo 'DenyUsers work' > /etc/ssh/sshd_config.d/00-deny.conf\n"
        ),
        tag=tag,
        rm=True,
    )
    try:
        run = create(run_playbook, "it-deny", size=2, image=tag)
        assert run.rc != 0
        text = " ".join(run.failures)
        assert "the health gate of session it-deny failed (checked twice): " in text, run
        assert "sub1 on agent " in text and ": ssh: " in text, text
        assert "Permission denied" in text, text
        assert labelled(docker_client, "it-deny") == ([], [])
    finally:
        sweep(docker_client, "it-deny")
        docker_client.images.remove(tag, force=True)
