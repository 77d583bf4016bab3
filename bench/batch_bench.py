"""How long a batch session takes around its command: ``bai-cluster session run`` to the
command's first output line, and the command's end to the session gone (the CLI's exit,
after the destroy). Run from the repository root, on the lab or this machine's engine:

    .venv/bin/python bench/batch_bench.py [--repeat 3] [-i inventories/local] [--size 2]
        [--mode single-node|multi-node] [--mem 256m]

The command prints one line, sleeps a second and exits 0; the end is its runner's own
record (``ended``, epoch seconds, in the result), so the clocks compared are this
machine's and the container's, which share one kernel on the local engine and in the lab.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / ".venv" / "bin" / "bai-cluster"


def once(args: argparse.Namespace, name: str) -> tuple[float, float]:
    # -q --json: no progress lines; the command's output comes on stderr, the result on stdout.
    argv = [str(CLI), "-q", "--json", "session", "run", name, "-n", str(args.size)]
    argv += ["--mode", args.mode, "--mem", args.mem, "--cpu", "0.5", "--", "echo started; sleep 1"]
    if args.inventory:
        argv[1:1] = ["-i", args.inventory]
    began = time.time()
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    first = proc.stderr.readline()
    first_at = time.time() - began
    rest = proc.stdout.read()
    proc.stderr.read()
    proc.wait(timeout=600)
    gone_at = time.time()
    if proc.returncode != 0 or first.strip() != "started":
        raise SystemExit(f"run failed (exit {proc.returncode}): {first}{rest}")
    job = json.loads(rest)
    return first_at, gone_at - float(job["ended"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("-i", "--inventory")
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--mode", default="single-node")
    parser.add_argument("--mem", default="256m")
    args = parser.parse_args()
    firsts, ends = [], []
    for i in range(args.repeat):
        first, end = once(args, f"bench-batch-{i}")
        firsts.append(first)
        ends.append(end)
        print(f"run {i}: first line {first:.1f} s, end to gone {end:.1f} s", file=sys.stderr)
    where = args.inventory or "the lab"
    print("| where | size | mode | runs | to first line (median) | end to gone (median) |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {where} | {args.size} | {args.mode} | {args.repeat} | "
        f"{statistics.median(firsts):.1f} s | {statistics.median(ends):.1f} s |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
