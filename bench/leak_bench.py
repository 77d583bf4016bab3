"""Leak check: many create and destroy cycles leave the cluster exactly as it was.

    .venv/bin/python bench/leak_bench.py [--cycles 100] [--modes single,multi]

On the embedded lab (make lab-up && make site): each cycle creates a session of 2
containers and destroys it, ``single`` on one agent (a bridge), ``multi`` across both
(an overlay made through a manager: 2 x 5g do not fit one agent's 8g). Before the first and
after the last cycle it takes a snapshot of what a session could leave behind, on every
engine node of the lab (agents and managers): containers, networks and volumes; the
loaded nftables ruleset and iptables rules (counters stripped); the files under
/run/bai-cluster (admission locks) and any session key file; and the session ledger in
the swarm (its sessions and the sessions its kept reads show). It prints a Markdown table
(cycles, failures, create and destroy times) and the snapshot's differences: none is the
pass. Exit status 1 when anything differs or a cycle failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
NODES = ("agent1", "agent2", "manager", "manager2", "manager3")
MODES = {
    "single": {"session_size": 2, "session_resources": {"cpu": 0.5, "mem": "256m"}},
    "multi": {
        "session_size": 2,
        "session_mode": "multi-node",
        "session_resources": {"cpu": 0.5, "mem": "5g"},
    },
}
COUNTERS = re.compile(r"counter packets \d+ bytes \d+|\[\d+:\d+\]")


def node(name: str, *argv: str) -> str:
    out = subprocess.run(
        ["docker", "exec", f"bai-lab-{name}", *argv], capture_output=True, text=True, check=False
    )
    return out.stdout


def snapshot() -> dict[str, object]:
    """What a session may leave behind, per node, and the ledger's sessions."""
    shot: dict[str, object] = {}
    for name in NODES:
        shot[f"{name} containers"] = sorted(
            node(name, "docker", "ps", "-a", "--format", "{{.Names}}").split()
        )
        shot[f"{name} networks"] = sorted(
            node(name, "docker", "network", "ls", "--format", "{{.Name}}").split()
        )
        shot[f"{name} volumes"] = sorted(node(name, "docker", "volume", "ls", "-q").split())
        shot[f"{name} nftables"] = COUNTERS.sub("", node(name, "nft", "list", "ruleset"))
        rules = COUNTERS.sub("", node(name, "iptables-save")).splitlines()
        shot[f"{name} iptables"] = [line for line in rules if not line.startswith("#")]
        shot[f"{name} /run/bai-cluster"] = sorted(
            node(name, "ls", "-a", "/run/bai-cluster").split()
        )
        shot[f"{name} key files"] = sorted(
            node(name, "sh", "-c", "find / -xdev -name 'id_*' -path '*bai*' 2>/dev/null").split()
        )
    raw = node("manager2", "docker", "config", "inspect", "bai-session-ledger")
    ledger = (
        json.loads(json.loads(raw)[0]["Spec"]["Labels"]["ai.backend.cluster.ledger"]) if raw else {}
    )
    shot["ledger sessions"] = sorted(ledger.get("sessions") or {})
    shot["ledger kept sessions"] = sorted(
        str(row.get("name"))
        for record in (ledger.get("agents") or {}).values()
        for row in (record.get("sessions") or {}).values()
    )
    return shot


def playbook(path: str, **extra: object) -> tuple[int, float]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    started = time.monotonic()
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), path, "-e", json.dumps(extra)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        # What failed (the fatal task and its message), not only the timing table.
        lines = proc.stdout.splitlines()
        fatal = [i for i, line in enumerate(lines) if line.startswith(("fatal:", "failed:"))]
        shown = [lines[j] for i in fatal for j in range(max(0, i - 2), min(len(lines), i + 12))]
        sys.stderr.write(f"{path} {extra.get('session_name')}: exit {proc.returncode}\n")
        sys.stderr.write("\n".join(shown or lines[-40:]) + "\n")
    return proc.returncode, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--modes", default="single,multi")
    args = parser.parse_args()
    before = snapshot()
    rows = []
    for mode in args.modes.split(","):
        creates, destroys, failed = [], [], 0
        for i in range(args.cycles):
            name = f"leak-{mode}-{i}"
            rc, took = playbook("playbooks/session_create.yml", session_name=name, **MODES[mode])
            creates.append(took)
            gone, took = playbook("playbooks/session_destroy.yml", session_name=name)
            destroys.append(took)
            failed += bool(rc) + bool(gone)
        rows.append((mode, args.cycles, failed, creates, destroys))
    after = snapshot()
    print("| mode | cycles | failures | create mean (s) | create p95 (s) | destroy mean (s) |")
    print("|---|---|---|---|---|---|")
    for mode, cycles, failed, creates, destroys in rows:
        p95 = sorted(creates)[int(0.95 * (len(creates) - 1))]
        print(
            f"| {mode} | {cycles} | {failed} | {statistics.mean(creates):.1f} | {p95:.1f} | "
            f"{statistics.mean(destroys):.1f} |"
        )
    differs = [key for key in before if before[key] != after[key]]
    for key in differs:
        print(f"differs: {key}\n  before: {before[key]}\n  after:  {after[key]}")
    print("left behind: nothing" if not differs else f"left behind: {len(differs)} difference(s)")
    return 1 if differs or any(r[2] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
