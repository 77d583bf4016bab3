"""Scheduler pass benchmark: 1,000 queued sessions over 64 virtual agents.

    .venv/bin/python bench/queue_bench.py [--queued 1000] [--agents 64] [--runs 3]

A file ledger is written with AGENTS agents of 8 CPUs (declared, no reads: placement
takes their declared capacity, the ledger's sessions as their load), each one full with
a running session, and QUEUED queued sessions of 2 x 2 CPUs (multi-node) or 1 x 4 CPUs
(single-node), by turns. Then:

- the pure pass (scheduling/queue/scheduler.py: schedule, as bai_session_ledger's
  state=scheduled runs it) with every agent full, and with half of them freed (the pass
  then decides which of the queue start in queue order);
- the real playbook, ansible-playbook playbooks/session_schedule.yml, on an inventory of
  the AGENTS virtual agents (ansible_connection local) with every agent full, so that
  it decides over the whole queue and starts nothing (wall time of the whole run and the
  ledger module's own step).

Prints a Markdown table, and the ledger's size (the swarm store caps it at 1 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import queue as q
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec

REPO = Path(__file__).resolve().parents[1]
GI = 1024**3


def full_session(agent: str) -> dict[str, Any]:
    return {
        "name": f"busy-{agent}",
        "session_id": f"sid-{agent}",
        "spec_hash": "x",
        "owner": "ops",
        "state": document.READY,
        "reserved_at": 1.0,
        "expires_at": None,
        "ready_at": 2.0,
        "kernels": [
            {"host": "main1", "agent": agent, "cpu": 8.0, "mem": GI, "gpu": 0, "gpu_devices": []}
        ],
    }


def build_ledger(queued: int, agents: list[str]) -> document.Ledger:
    ledger = document.empty()
    for name in agents:
        ledger.sessions[f"busy-{name}"] = document.Reservation.from_dict(full_session(name))
    for i in range(queued):
        raw = (
            {"name": f"q{i:04d}", "size": 2, "mode": "multi-node", "resources": {"cpu": 2}}
            if i % 2 == 0
            else {"name": f"q{i:04d}", "size": 1, "resources": {"cpu": 4}}
        )
        spec = normalize_spec({**raw, "owner": f"user{i % 10}", "image": "bai/session:latest"})
        q.enqueue(ledger, spec, now=1000.0 + i, reason="")
    return ledger


def pure_pass(
    ledger: document.Ledger, agents: list[str], free: int, runs: int
) -> tuple[float, int]:
    """Best of RUNS (ms) of one pass with the first FREE agents emptied; sessions started."""
    best, started = float("inf"), 0
    for _run in range(runs):
        began = time.perf_counter()
        waiting = q.waiting(ledger)
        pool = [
            Agent(a, "default", 8, 32 * GI, 0, 0.0 if i < free else 8.0)
            for i, a in enumerate(agents)
        ]
        decisions = q.schedule(waiting, pool)
        best = min(best, (time.perf_counter() - began) * 1000)
        started = sum(1 for d in decisions if d.starts)
    return best, started


def playbook_pass(ledger: document.Ledger, agents: list[str], runs: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.json"
        path.write_text(document.dumps(ledger))
        inventory = Path(tmp) / "agents.yml"
        inventory.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "vars": {"bai_ledger_path": str(path), "bai_ledger_store": "file"},
                        "hosts": {"localhost": {"ansible_connection": "local"}},
                        "children": {
                            "agents": {
                                "hosts": {a: {"bai_agent_id": a} for a in agents},
                                "vars": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": sys.executable,
                                    "bai_agent_resources": {"cpu": 8, "mem": "32g", "gpu": 0},
                                },
                            }
                        },
                    }
                }
            )
        )
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_SHOW_CUSTOM_STATS": "true",
            "PATH": f"{REPO / '.venv/bin'}:{os.environ.get('PATH', '')}",
        }
        took = []
        for _run in range(runs):
            began = time.monotonic()
            done = subprocess.run(
                [str(REPO / ".venv/bin/ansible-playbook"), "-i", str(inventory),
                 "playbooks/session_schedule.yml"],
                cwd=REPO, env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            took.append(time.monotonic() - began)
            if done.returncode != 0 or "{" not in done.stdout:
                raise SystemExit(done.stdout[-4000:] + done.stderr[-2000:])
            report = json.JSONDecoder().raw_decode(done.stdout[done.stdout.index("{") :])[0]
            stats = report["global_custom_stats"]["bai_schedule"]
            assert stats["start"] == [] and int(stats["waiting"]) == len(ledger.queue or {})
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    agents = [f"va{i:02d}" for i in range(args.agents)]
    ledger = build_ledger(args.queued, agents)
    size = len(document.dumps_compact(ledger))
    full_ms = pure_pass(ledger, agents, 0, args.runs)[0]
    half_ms, started = pure_pass(ledger, agents, args.agents // 2, args.runs)
    wall = playbook_pass(ledger, agents, args.runs)
    print(f"{args.queued} queued sessions, {args.agents} agents of 8 CPUs\n")
    print("| what | time |")
    print("|---|---|")
    print(f"| pure pass, every agent full (nothing starts) | {full_ms:.0f} ms |")
    print(f"| pure pass, half the agents free ({started} start) | {half_ms:.0f} ms |")
    print(
        f"| session_schedule.yml, every agent full (whole run, best of {args.runs}) | "
        f"{min(wall):.2f} s (median {sorted(wall)[len(wall) // 2]:.2f} s) |"
    )
    print(f"\nledger size (compact JSON, as the swarm store keeps it): {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
