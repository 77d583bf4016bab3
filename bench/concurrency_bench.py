"""Concurrency stress: many creates at once asking for more than the agent offers.

    .venv/bin/python bench/concurrency_bench.py [--creates 8] [--size 2] [--cpu 1]

Starts --creates session_create.yml runs at the same moment on ``inventories/local``
(this machine's engine), with the agent's capacity declared as half of what they ask for
together, and a ledger file of its own. Prints a Markdown table: how many were created,
how many PENDING, CPUs and memory given out (read back from the running containers'
labels and Docker's limits) against what is offered, and the wall time. Then destroys
everything it made.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
LABEL_SESSION = "ai.backend.cluster.session"
PREFIX = "bench-race"
GI = 1024**3


def command(name: str, extra: dict) -> tuple[list[str], dict]:
    argv = [str(VENV_BIN / "ansible-playbook"), f"playbooks/{name}", "-i", "inventories/local"]
    argv += ["-e", json.dumps(extra)]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return argv, env


def start(name: str, extra: dict) -> subprocess.Popen:
    argv, env = command(name, extra)
    return subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def run(name: str, extra: dict) -> int:
    argv, env = command(name, extra)
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, check=False).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=8)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--cpu", type=float, default=1.0)
    parser.add_argument("--mem-mib", type=int, default=256)
    args = parser.parse_args()
    asked_cpu = args.creates * args.size * args.cpu
    offered = {"cpu": asked_cpu / 2, "mem": f"{args.creates * args.size * args.mem_mib // 2}m"}
    ledger = Path(tempfile.mkdtemp(prefix="bai-bench-")) / "ledger.json"
    names = [f"{PREFIX}{i}" for i in range(args.creates)]
    common = {
        "bai_ledger_path": str(ledger),
        "bai_agent_resources": {**offered, "gpu": 0},
    }
    began = time.monotonic()
    procs = {
        name: start(
            "session_create.yml",
            {
                **common,
                "session_name": name,
                "session_size": args.size,
                "session_resources": {"cpu": args.cpu, "mem": f"{args.mem_mib}m"},
            },
        )
        for name in names
    }
    outputs = {name: proc.communicate()[0] for name, proc in procs.items()}
    wall = time.monotonic() - began
    codes = {name: procs[name].returncode for name in names}
    created = [n for n, rc in codes.items() if rc == 0]
    pending = [n for n, rc in codes.items() if rc != 0 and "PENDING" in outputs[n]]
    other = sorted(set(names) - set(created) - set(pending))
    client = docker.from_env()
    cpu = mem = 0.0
    for container in client.containers.list(filters={"label": LABEL_SESSION}):
        if container.labels[LABEL_SESSION].startswith(PREFIX):
            cpu += container.attrs["HostConfig"]["NanoCpus"] / 1e9
            mem += container.attrs["HostConfig"]["Memory"]
    print(
        "| creates | asked CPUs | offered CPUs | created | PENDING | other failures "
        "| CPUs given out | memory given out / offered | wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    mem_offered = args.creates * args.size * args.mem_mib / 2 / 1024
    print(
        f"| {args.creates} x {args.size} x {args.cpu:g} CPU | {asked_cpu:g} | {offered['cpu']:g} "
        f"| {len(created)} | {len(pending)} | {len(other)} | {cpu:g} "
        f"| {mem / GI:.2f} / {mem_offered:.2f} GiB | {wall:.1f} |"
    )
    for name in other:
        print(f"{name} failed otherwise:\n{outputs[name][-1500:]}")
    for name in names:
        run("session_destroy.yml", {**common, "session_name": name})


if __name__ == "__main__":
    main()
