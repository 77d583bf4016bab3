"""A real ansible-playbook run for the unit tests that need one (no Docker): this
checkout's ansible.cfg unless ``env`` says otherwise, Ansible's temporary files under the
test's folder, and the output kept for the test to read."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def ansible_playbook(
    args: Sequence[str],
    tmp_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path = REPO,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """``ansible-playbook ARGS`` from this venv; the finished process (not checked)."""
    environ = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        **(env or {}),
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
