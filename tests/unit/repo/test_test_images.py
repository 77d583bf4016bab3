"""scripts/test_images.sh: the wheel cache folder is named by the requirements' content."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = Path("scripts") / "test_images.sh"
REQ = Path("tests") / "images" / "session-hpc" / "requirements.txt"


def cache_dir(root: Path) -> Path:
    proc = subprocess.run(
        ["bash", str(root / SCRIPT), "--print-cache-dir"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return Path(proc.stdout.strip())


def test_cache_dir_is_the_requirements_hash(tmp_path: Path):
    """A copy of the script and the file, so the real checkout is neither read nor written."""
    (tmp_path / SCRIPT).parent.mkdir(parents=True)
    (tmp_path / REQ).parent.mkdir(parents=True)
    shutil.copy(REPO / SCRIPT, tmp_path / SCRIPT)
    shutil.copy(REPO / REQ, tmp_path / REQ)

    first = cache_dir(tmp_path)
    digest = hashlib.sha256((tmp_path / REQ).read_bytes()).hexdigest()
    assert first == tmp_path / ".cache" / "wheels" / digest[:16]
    assert cache_dir(tmp_path) == first

    (tmp_path / REQ).write_text((tmp_path / REQ).read_text().replace("3.11", "3.12"))
    second = cache_dir(tmp_path)
    assert second != first
    assert second.name == hashlib.sha256((tmp_path / REQ).read_bytes()).hexdigest()[:16]
    assert not (tmp_path / ".cache").exists()


def test_requirements_pin_every_package():
    """Every requirement is `name==version`, torch included; the target Python is named."""
    lines = (REPO / REQ).read_text().splitlines()
    reqs = [line for line in lines if line.strip() and not line.startswith("#")]
    assert reqs and all("==" in r and ";" not in r for r in reqs), reqs
    assert any(r.startswith("torch==") for r in reqs), reqs
    assert any(line.startswith("# python-version: 3.") for line in lines), lines
