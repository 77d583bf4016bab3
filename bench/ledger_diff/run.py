"""The ledger's text, old code against new: a refactor of the ledger's records must write
every ledger byte for byte as before.

Runs tests/unit twice, in a worktree of REV (the old code, with its own tests) and in this
checkout, logging every ledger text the tests serialize (ledger_log_plugin.py), and
compares them test by test. What real time gives is masked: epoch stamps (numbered in
order of appearance, per test), decayed usage, a pass's duration and the waits. Tests that
run threads against one store write in an order of their own, and differ from run to run.

  .venv/bin/python bench/ledger_diff/run.py REV      (e.g. origin/main, or a commit)

With LEDGER_DIFF_SHOW=N, the first difference of each of the first N tests that differ is
printed too (a unified diff of the masked texts).
"""

from __future__ import annotations

import collections
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
EPOCH = re.compile(r"1[78]\d{8}(?:\.\d+)?")
TIMED = re.compile(r'"(units|seconds|sum|max)": ?[0-9.e+-]+')


def run_tests(checkout: Path, log: Path, collections_root: Path | None) -> None:
    env = {"LEDGER_DIFF_LOG": str(log), "PYTHONPATH": str(Path(__file__).parent)}
    if collections_root is not None:
        env["PYTHONPATH"] = f"{collections_root}:{env['PYTHONPATH']}"
    command = [str(PYTHON), "-m", "pytest", "tests/unit", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "ledger_log_plugin", "--hypothesis-seed=0"]
    subprocess.run(command, cwd=checkout, env={**os.environ, **env}, check=True)


def texts(log: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = collections.defaultdict(list)
    # Two threads' lines that met can split a character: read what is there.
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            node, _name, text = json.loads(line)
        except ValueError:
            continue  # two threads' lines that met
        found[node].append(text)
    return found


def masked(written: list[str]) -> list[str]:
    stamps: dict[str, int] = {}
    out = []
    for text in written:
        text = TIMED.sub(lambda m: f'"{m.group(1)}": ~', text)
        out.append(EPOCH.sub(lambda m: f"T{stamps.setdefault(m.group(0), len(stamps))}", text))
    return out


def main(rev: str) -> int:
    with tempfile.TemporaryDirectory(prefix="bai-ledger-diff.") as work:
        old = Path(work) / "old"
        subprocess.run(["git", "worktree", "add", "-q", str(old), rev], cwd=REPO, check=True)
        try:
            (old / ".venv").symlink_to(REPO / ".venv")  # what repository checks run
            root = Path(work) / "collections"
            (root / "ansible_collections" / "bai").mkdir(parents=True)
            (root / "ansible_collections" / "bai" / "cluster").symlink_to(old)
            run_tests(old, Path(work) / "old.jsonl", root)
            run_tests(REPO, Path(work) / "new.jsonl", None)
            before, after = texts(Path(work) / "old.jsonl"), texts(Path(work) / "new.jsonl")
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old)], cwd=REPO, check=False
            )
    both = sorted(set(before) & set(after))
    differ = [n for n in both if masked(before[n]) != masked(after[n])]
    print(f"tests that write a ledger: {len(both)}, ledger texts: {sum(map(len, before.values()))}")
    print(f"tests whose texts differ: {len(differ)}")
    for node in differ:
        print(f"  {node}")
    for node in differ[: int(os.environ.get("LEDGER_DIFF_SHOW") or 0)]:
        old_texts, new_texts = masked(before[node]), masked(after[node])
        first = next(
            (i for i, pair in enumerate(zip(old_texts, new_texts)) if pair[0] != pair[1]),
            min(len(old_texts), len(new_texts)),
        )
        print(f"\n{node}: text {first} of {len(old_texts)} (old) / {len(new_texts)} (new)")
        pair = [
            texts[first].splitlines() if first < len(texts) else []
            for texts in (old_texts, new_texts)
        ]
        print("\n".join(difflib.unified_diff(*pair, "old", "new", lineterm="", n=2)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "HEAD"))
