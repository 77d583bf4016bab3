"""The mesh check's own bash, run here with stand-ins for getent and ssh (the real ones
run in the lab's sessions): a name the overlay's gossip has not brought yet is awaited,
one that never comes fails with what ssh said."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.containers import mesh

GETENT = """#!/bin/bash
# main1 is always known; sub1 once the file "known" exists next to this folder
[ "$2" = main1 ] && exit 0
[ -e "$(dirname "$0")/../known" ]
"""
SSH = """#!/bin/bash
h="${@: -2:1}"
getent hosts "$h" > /dev/null || {
  echo "ssh: Could not resolve hostname $h: No address associated with hostname" >&2; exit 255; }
echo "$h"
"""


@pytest.fixture
def stand_ins(tmp_path: Path) -> dict:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in (("getent", GETENT), ("ssh", SSH)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    return {"PATH": f"{bin_}:/usr/bin:/bin"}


def run(env: dict, resolve_s: int, *hosts: str) -> tuple[list[str], int]:
    cmd = ["bash", "-c", mesh.script(resolve_s), "mesh", *hosts]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=False)
    return done.stdout.splitlines(), done.returncode


def test_a_name_that_arrives_late_is_awaited(stand_ins, tmp_path):
    later = subprocess.Popen(["bash", "-c", f"sleep 0.6; touch {tmp_path}/known"])
    began = time.monotonic()
    lines, code = run(stand_ins, 10, "main1", "sub1")
    later.wait()
    assert (lines, code) == (["ok main1", "ok sub1"], 0)
    assert mesh.broken("\n".join(lines), code) == []
    assert 0.5 < time.monotonic() - began < 5


def test_a_name_that_never_comes_fails_after_the_bound_with_what_ssh_said(stand_ins):
    began = time.monotonic()
    lines, code = run(stand_ins, 1, "main1", "sub1")
    assert code == 1 and lines[0] == "ok main1"
    assert lines[1] == (
        "FAILED sub1: ssh: Could not resolve hostname sub1: No address associated with hostname"
    )
    assert mesh.broken("\n".join(lines), code) == [lines[1]]
    assert time.monotonic() - began < 5


def test_the_module_runs_the_script_with_its_default_bound():
    assert mesh.script(mesh.RESOLVE_S) == mesh.SCRIPT and "SECONDS + 30" in mesh.SCRIPT
