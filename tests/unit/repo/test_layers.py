"""The floors of plugins/module_utils: each package imports only from the floors below
it, so no arrow between packages runs back up and no two packages import each other.

A new package gets its floor here, with the packages it stands on below it
(docs/development.md says where each concept lives)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3] / "plugins" / "module_utils"
PREFIX = "ansible_collections.bai.cluster.plugins.module_utils."

# Lowest first. common: parsing, errors, labels, addresses, archives; engine and gpu: the
# Docker API and the devices; session: what a session is (the request); jobs and network:
# what a session runs and how it is joined; scheduling: where and when it runs (ledger,
# queue, placement); containers and hosts: making it on the agents; metrics reads them all.
FLOORS = {
    "common": 0,
    "engine": 1,
    "gpu": 1,
    "session": 2,
    "jobs": 3,
    "network": 3,
    "scheduling": 4,
    "containers": 5,
    "hosts": 5,
    "metrics": 6,
}


@cache
def _arrows() -> list[tuple[str, str, str]]:
    """(importing package, imported package, file) for every import between packages."""
    found: list[tuple[str, str, str]] = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if len(parts) < 2:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
                target = node.module[len(PREFIX) :].split(".")[0]
                if target != parts[0]:
                    found.append((parts[0], target, str(path.relative_to(ROOT))))
    return found


def test_every_package_has_a_floor():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(FLOORS), "give each package of module_utils its floor in FLOORS"


def test_imports_only_run_down():
    arrows = _arrows()
    assert len(arrows) > 100, "the walk found the imports between packages"
    up = [
        f"{f}: {a} (floor {FLOORS[a]}) imports {b} (floor {FLOORS[b]})"
        for a, b, f in arrows
        if FLOORS[b] >= FLOORS[a]
    ]
    assert not up, "\n".join(up)


def test_no_two_way_pairs():
    arrows = {(a, b) for a, b, _f in _arrows()}
    both = sorted(f"{a} <-> {b}" for a, b in arrows if a < b and (b, a) in arrows)
    assert not both, f"packages that import each other: {both}"


# scheduling/ by concept, lowest first: the ledger's document and its records; placement
# (which agent runs which kernel); the queue and its policies; the module's steps.
SCHEDULING = ROOT / "scheduling"
SCHEDULING_FLOORS = {"ledger": 0, "placement": 1, "queue": 2, "steps": 3}
MAX_LINES = 400


def test_scheduling_is_its_sub_packages_only():
    loose = sorted(p.name for p in SCHEDULING.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"put these in a sub-package of scheduling/: {loose}"
    packages = {p.name for p in SCHEDULING.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(SCHEDULING_FLOORS)


def test_scheduling_sub_packages_import_only_down():
    up = []
    for path in sorted(SCHEDULING.rglob("*.py")):
        mine = path.relative_to(SCHEDULING).parts[0]
        if mine not in SCHEDULING_FLOORS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                PREFIX + "scheduling."
            ):
                theirs = node.module[len(PREFIX + "scheduling.") :].split(".")[0]
                if theirs != mine and SCHEDULING_FLOORS[theirs] >= SCHEDULING_FLOORS[mine]:
                    up.append(f"{path.relative_to(SCHEDULING)} imports {node.module}")
    assert not up, "\n".join(up)


def test_no_scheduling_file_is_over_400_lines():
    long = {
        str(p.relative_to(SCHEDULING)): n
        for p in SCHEDULING.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split by concept: {long}"
