"""The controller's plugins stay light: a filter, test or lookup plugin is loaded by every
playbook run that uses one of its names, so none may import the Docker SDK (about 0.1 s
each time, in each process that loads it). Each plugin is imported in a fresh Python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
LIGHT = sorted(
    f"ansible_collections.bai.cluster.plugins.{kind}.{path.stem}"
    for kind in ("filter", "test", "lookup")
    for path in (PLUGINS / kind).glob("*.py")
    if path.stem != "__init__"
)


@pytest.mark.parametrize("module", LIGHT)
def test_a_controller_plugin_does_not_import_the_docker_sdk(module):
    probe = f"import sys, {module}; print('docker' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", f"{module} imports the Docker SDK"
