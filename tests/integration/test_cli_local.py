"""The bai-cluster CLI on this machine's engine (``-i inventories/local``), run for real
as a subprocess: create, an idempotent create again, ``session ssh`` and destroy, with
nothing left in the CLI's TMPDIR. The lab's side of the CLI is in test_cli_lab."""

from __future__ import annotations

import json
import subprocess

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_SESSION
from conftest import VENV_BIN
from conftest import bai_cli as cli

pytestmark = pytest.mark.integration

LOCAL = "cli-it-local"
INVENTORY = ("-i", "inventories/local")


def labelled() -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL_SESSION}={LOCAL}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


@pytest.fixture
def tmp(tmp_path):
    if not (VENV_BIN / "bai-cluster").exists():
        pytest.skip(f"{VENV_BIN / 'bai-cluster'} is missing: run scripts/setup.sh venv")
    return tmp_path


def test_local_inventory_create_show_destroy(tmp):
    try:
        run = cli(tmp, *INVENTORY, "--json", "session", "create", LOCAL, "-n", "2", "--mem", "256m")
        assert run.returncode == 0, run.stderr
        session = json.loads(run.stdout)
        assert session["action"] == "create" and session["size"] == 2
        assert {c["agent"] for c in session["containers"]} == {"localhost"}
        assert len(labelled()) == 2
        again = cli(tmp, *INVENTORY, "session", "create", LOCAL, "-n", "2", "--mem", "256m")
        assert again.returncode == 0, again.stderr
        assert "already exists with this spec" in again.stdout
        ssh = cli(tmp, *INVENTORY, "session", "ssh", LOCAL, "sub1", "--", "hostname")
        assert (ssh.returncode, ssh.stdout.strip()) == (0, "sub1"), ssh.stderr
    finally:
        gone = cli(tmp, *INVENTORY, "--json", "session", "destroy", LOCAL)
    assert gone.returncode == 0, gone.stderr
    assert sorted(json.loads(gone.stdout)["containers"]) == [
        f"bai-{LOCAL}-main1",
        f"bai-{LOCAL}-sub1",
    ]
    assert labelled() == []
    assert list(tmp.iterdir()) == []
