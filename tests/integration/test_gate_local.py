"""The health gate (docs/sessions.md, "The health gate") on this machine's engine, in real
session containers: main1 checks every member over the session's bridge.

- A healthy 4-member session with a read-write and a read-only data folder passes every
  check of every member, each with what it measured (the route's MTU and a round trip,
  the streams' seconds, the clock's offset); the markers main1 wrote are gone; the gate
  takes at most 10 s.
- An operator hook in the image (/etc/bai/gate.d) that fails on sub1: the create fails
  naming the hook, the member, its agent and the hook's own words, and leaves nothing
  behind; the user's command never ran (its output file never appears).

The faults of the network, the data folders, the clocks and the devices are each made to
fail in tests/unit/.../test_gate_script.py (the gate's own bash with stand-ins) and, with
a GPU the runtime does not show, in test_gpu_lab.py.
"""

from __future__ import annotations

import base64
import io
import shutil
import tempfile
from pathlib import Path

import pytest
from test_session_local import DATA_ROOT, create, ensure_dir, labelled, session, sweep

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
