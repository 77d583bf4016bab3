"""tests/conftest.py: with CI=true a skip fails unless the test says it cannot run here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

TESTS = """
import pytest

def test_skips():
    pytest.skip("the lab is not up")

@pytest.mark.cannot_run_here("no GPU on these machines")
def test_cannot_run_here():
    pytest.skip("needs a GPU")

def test_passes():
    assert 1 + 1 == 2
"""


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_policy.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "-o",
            "markers=cannot_run_here(reason): test",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_outside_ci_skips_stay_skips(tmp_path):
    proc = run(tmp_path, None)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 2 skipped" in proc.stdout


def test_in_ci_a_skip_fails_unless_the_test_cannot_run_here(tmp_path):
    proc = run(tmp_path, "true")
    assert proc.returncode == 1, proc.stdout
    assert "FAILED test_policy.py::test_skips" in proc.stdout
    assert "skipped with CI=true, which counts as a failure: the lab is not up" in proc.stdout
    assert "SKIPPED [1] test_policy.py" in proc.stdout and "needs a GPU" in proc.stdout
    assert "1 failed, 1 passed, 1 skipped" in proc.stdout
