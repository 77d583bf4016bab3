"""Modules import their payload from a zip (AnsiballZ): module_utils/common/compile_once.py
makes zipimport compile each file once. These tests import from a real zip, in a child
Python so that this process's zipimport is left as it was."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[5]
COMPILE_ONCE = REPO / "plugins" / "module_utils" / "common" / "compile_once.py"

# Counts zipimport's compiles per file, imports two modules (one importing the other) from
# the zip, and prints the counts; with "memo", compile_once.py is loaded first.
CHILD = textwrap.dedent(
    """
    import collections, importlib.util, json, sys, zipimport
    counts = collections.Counter()
    original = zipimport._compile_source
    def counting(pathname, source):
        counts[pathname.rsplit("/", 1)[-1]] += 1
        return original(pathname, source)
    zipimport._compile_source = counting
    if sys.argv[2] == "memo":
        spec = importlib.util.spec_from_file_location("compile_once", sys.argv[3])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        spec.loader.exec_module(module)  # a second load changes nothing
    sys.path.insert(0, sys.argv[1])
    import pkg.first
    print(json.dumps({"counts": counts, "value": pkg.first.VALUE}))
    """
)


def _payload(tmp_path: Path) -> Path:
    archive = tmp_path / "payload.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("pkg/__init__.py", "")
        zipped.writestr("pkg/first.py", "from pkg.second import BASE\nVALUE = BASE + 1\n")
        zipped.writestr("pkg/second.py", "BASE = 41\n")
    return archive


def _imported(tmp_path: Path, mode: str) -> dict:
    argv = [sys.executable, "-c", CHILD, str(_payload(tmp_path)), mode, str(COMPILE_ONCE)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_zipimport_compiles_each_file_twice_without_it(tmp_path):
    # Why compile_once exists: find_spec's get_filename and exec_module's get_code each
    # compile the source. If a Python stops doing this, compile_once is no longer needed.
    got = _imported(tmp_path, "plain")
    assert got["value"] == 42
    assert got["counts"] == {"__init__.py": 2, "first.py": 2, "second.py": 2}


def test_with_it_each_file_compiles_once_and_imports_the_same(tmp_path):
    got = _imported(tmp_path, "memo")
    assert got["value"] == 42
    assert got["counts"] == {"__init__.py": 1, "first.py": 1, "second.py": 1}


def test_every_module_that_ships_module_utils_loads_it_first():
    # First among this collection's imports: what it imports before would compile twice.
    for module in sorted((REPO / "plugins" / "modules").glob("bai_*.py")):
        ours = [
            line
            for line in module.read_text().splitlines()
            if line.startswith("from ansible_collections.bai.cluster.plugins.module_utils")
        ]
        if ours:
            assert "import compile_once" in ours[0], module.name
