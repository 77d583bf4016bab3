"""The health gate (docs/sessions.md, "The health gate") on this machine's engine, in real
session containers: main1 checks every member over the session's bridge.

- A healthy 4-member session with a read-write and a read-only data folder passes every
  check of every member, each with what it measured (the route's MTU and a round trip,
  the streams' seconds, the clock's offset); the markers main1 wrote are gone; the gate
  takes at most 10 s.
- An operator hook in the image (/etc/bai/gate.d) that fails on sub1: the create fails
  naming the hook, the member, its agent and the hook's own words, and leaves nothing
  behind; the user's command never ran (its output file never appears).

- Real faults in a healthy session's sub1, made from this machine (as root) in sub1's own
  namespaces with nsenter, the gate run again from main1 (gate.run_from, the module's
  own call) after each: its interface's MTU lowered to 1400 (mtu), packets over 1400
  bytes dropped on their way in (an nft rule: the login stalls, mtu), its new TCP
  connections to main1's sshd dropped (a one-way block: tcp), its data folder unmounted
  (data). Each is named on sub1 alone; with the fault gone the gate passes again.

A clock cannot be skewed here (the containers share this machine's clock): the clock
check, like every other, is made to fail in tests/unit/.../test_gate_script.py (the
gate's own bash with stand-ins); a GPU the runtime does not show, in test_gpu_lab.py.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.containers import gate
from test_session_local import (
    DATA_ROOT,
    container,
    create,
    ensure_dir,
    labelled,
    session,
    sweep,
)

pytestmark = pytest.mark.integration

HOOK_IMAGE = "bai/it-gate-hook:latest"
HOOK = b"""#!/bin/sh
# Fails on sub1 only, as a site check of one member's port would.
[ "$(hostname)" = sub1 ] || exit 0
echo "ib0: port state DOWN"
exit 1
"""


@pytest.fixture(scope="module")
def data():
    base = Path(tempfile.mkdtemp(prefix="it-gate-", dir=ensure_dir(DATA_ROOT)))
    base.chmod(0o777)
    (base / "sets").mkdir()
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_healthy_gang_passes_every_check_with_what_it_measured(run_playbook, docker_client, data):
    mounts = [
        {"src": str(data), "dst": "/home/work/data"},
        {"src": str(data / "sets"), "dst": "/data/sets", "readonly": True},
    ]
    with session(run_playbook, docker_client, "it-gate", size=4, mounts=mounts) as run:
        gate = run.stats["bai_session"]["gate"]
        members = gate["members"]
        assert sorted(members) == ["main1", "sub1", "sub2", "sub3"], gate
        for host, found in members.items():
            links = {"mtu", "tcp", "stream"} if host != "main1" else set()
            assert set(found) == {"ssh", "dns", "data", "clock", "gpu", "hook"} | links, found
            assert found["data"] == "2" and found["gpu"] == "0", found
            assert found["clock"].endswith(" s") and abs(float(found["clock"][:-2])) < 2
            if links:
                assert found["mtu"].startswith("1500 rtt_ms="), found
                assert found["stream"].startswith("up_s="), found
        assert gate["seconds"] <= 10, gate
        print(f"gate: 4 members, {gate['seconds']} s")
    assert [p.name for p in data.iterdir()] == ["sets"]  # no marker left


def test_a_failing_operator_hook_stops_the_create_before_user_code(run_playbook, docker_client):
    hook = base64.b64encode(HOOK)
    docker_client.images.build(
        fileobj=io.BytesIO(
            b"FROM bai/session:latest\nRUN mkdir -p /etc/bai/gate.d && echo " + hook
            + b" | base64 -d > /etc/bai/gate.d/10-ib && chmod 755 /etc/bai/gate.d/10-ib\n"
        ),
        tag=HOOK_IMAGE,
        rm=True,
    )  # fmt: skip
    out = Path(ensure_dir(DATA_ROOT)) / "it-gate-hook.out"
    out.unlink(missing_ok=True)
    try:
        run = create(
            run_playbook, "it-gate-hook", size=2, image=HOOK_IMAGE, type="batch",
            command=f"touch {out}",
            mounts=[{"src": DATA_ROOT, "dst": "/srv/bai-data"}],
        )  # fmt: skip
        assert run.rc != 0
        text = " ".join(run.failures)
        assert "the health gate of session it-gate-hook failed (checked twice): " in text, text
        assert "sub1 on agent localhost: hook: /etc/bai/gate.d/10-ib exit 1: " in text, text
        assert "ib0: port state DOWN" in text, text
        assert "main1 on agent" not in text, text
        assert labelled(docker_client, "it-gate-hook") == ([], [])
        assert not out.exists(), "the command ran"
    finally:
        sweep(docker_client, "it-gate-hook")
        docker_client.images.remove(HOOK_IMAGE, force=True)


HOSTS = ("main1", "sub1", "sub2")
# (what is done in sub1's namespaces, how it is undone, the check that must fail)
FAULTS = {
    "mtu lowered": (
        ["-n", "ip", "link", "set", "eth0", "mtu", "1400"],
        ["-n", "ip", "link", "set", "eth0", "mtu", "1500"],
        "mtu",
    ),
    "large packets dropped": (
        ["-n", "nft", "add table inet gatefault; add chain inet gatefault in "
         "{ type filter hook input priority 0; }; add rule inet gatefault in "
         "meta length > 1400 drop"],
        ["-n", "nft", "delete table inet gatefault"],
        "mtu",
    ),
    "one way blocked": (
        ["-n", "nft", "add table inet gatefault; add chain inet gatefault out "
         "{ type filter hook output priority 0; }; add rule inet gatefault out "
         "tcp dport 2200 tcp flags syn drop"],
        ["-n", "nft", "delete table inet gatefault"],
        "tcp",
    ),
    "data folder unmounted": (
        ["-m", "umount", "/home/work/data"],
        None,  # the session is destroyed after it
        "data",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def healthy(run_playbook, docker_client, data):
    if os.geteuid() != 0 or not shutil.which("nsenter") or not shutil.which("nft"):
        pytest.skip("the faults are made with nsenter and nft as root; not here")
    mounts = [{"src": str(data), "dst": "/home/work/data"}]
    with session(run_playbook, docker_client, "it-gate-f", size=3, mounts=mounts):
        yield {h: container(docker_client, "it-gate-f", h) for h in HOSTS}


def in_sub1(members, argv):
    pid = str(members["sub1"].attrs["State"]["Pid"])
    done = subprocess.run(["nsenter", "-t", pid, *argv], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, (argv, done.stderr)


def run_gate(docker_client, members) -> gate.Result:
    main1 = members["main1"].name
    return gate.run_from(docker_client.api, main1, HOSTS, dirs=[("/home/work/data", False)])


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_real_fault_in_one_member_is_named_there(docker_client, healthy, fault):
    make, undo, check = FAULTS[fault]
    in_sub1(healthy, make)
    try:
        began = time.monotonic()
        result = run_gate(docker_client, healthy)
        took = time.monotonic() - began
    finally:
        if undo:
            in_sub1(healthy, undo)
    failed = {(f.host, f.check) for f in result.failed()}
    assert ("sub1", check) in failed and {h for h, _c in failed} == {"sub1"}, result
    print(f"gate: {fault}: {sorted(failed)} in {took:.1f} s")
    if undo:
        assert run_gate(docker_client, healthy).failed() == []
