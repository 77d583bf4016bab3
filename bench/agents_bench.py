"""Session create and destroy against the number of agents ("virtual agents").

    .venv/bin/python bench/agents_bench.py [--agents 1,8,32,64] [--repeat 3]

For each count A, an inventory of A agents that all share this machine's engine (each
its own inventory host with ansible_connection=local, a name and a declared capacity,
and its own containers by the ai.backend.cluster.agent label), a ledger file of its
own, and an empty play over the same inventory as the fixed cost of ansible-playbook.
Timed, each the median of --repeat runs of a 2-container session:

  cold     the first create after the ledger was made (by a reconcile, untimed: a
           create on a ledger that does not exist yet reads every agent once), when it
           keeps no read of any agent: it places by the agents' declared capacity, then
           reads only the agent it placed on
  warm     a create while the ledger's read of the agent it places on is recent (the
           second session, on the same agent: va1 offers the most; reads none)
  no-op    the same create again (reads only the session's agent)
  destroy  (reaches only the session's agent)

Prints a Markdown table and writes bench/results/agents-<stamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import session_bench  # bench/, next to this script
import yaml

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
EMPTY_PLAY = REPO / "bench" / "empty_play.yml"


def inventory(folder: Path, agents: int) -> Path:
    path = folder / f"agents{agents}.yml"
    hosts = {f"va{i}": {"bai_agent_id": f"va{i}"} for i in range(1, agents + 1)}
    # va1 offers the most, so both creates land on it: the second finds its read recent.
    hosts["va1"]["bai_agent_resources"] = {"cpu": 8, "mem": "16g", "gpu": 0}
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "agents": {
                            "hosts": hosts,
                            "vars": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                                "bai_agent_resources": {"cpu": 4, "mem": "8g", "gpu": 0},
                            },
                        }
                    }
                }
            }
        )
    )
    return path


def playbook(path: str | Path, inv: Path, **extra) -> float:
    """Run a playbook quietly; its wall-clock seconds (raise on failure)."""
    return session_bench.playbook(str(path), str(inv), **extra)


def one_count(agents: int, repeat: int, folder: Path) -> dict:
    inv = inventory(folder, agents)
    empty = EMPTY_PLAY
    runs: dict[str, list[float]] = {"empty": [], "cold": [], "warm": [], "noop": [], "destroy": []}
    session = {"session_size": 2, "session_resources": {"cpu": 0.5, "mem": "256m"}}
    for attempt in range(repeat):
        ledger = folder / f"ledger-{agents}-{attempt}.json"
        base = {"bai_ledger_path": str(ledger), **session}
        runs["empty"].append(playbook(empty, inv))
        playbook("playbooks/session_reconcile.yml", inv, bai_ledger_path=str(ledger))
        runs["cold"].append(
            playbook("playbooks/session_create.yml", inv, session_name="bench-a", **base)
        )
        runs["warm"].append(
            playbook("playbooks/session_create.yml", inv, session_name="bench-b", **base)
        )
        runs["noop"].append(
            playbook("playbooks/session_create.yml", inv, session_name="bench-b", **base)
        )
        for name in ("bench-a", "bench-b"):
            took = playbook(
                "playbooks/session_destroy.yml", inv, session_name=name, bai_ledger_path=str(ledger)
            )
            if name == "bench-b":
                runs["destroy"].append(took)
    return {"agents": agents, **{k: round(statistics.median(v), 2) for k, v in runs.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--agents", default="1,8,32,64")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bai-agents-bench-") as tmp:
        for count in (int(a) for a in args.agents.split(",") if a):
            row = one_count(count, args.repeat, Path(tmp))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    meta = {"cpus": os.cpu_count(), "repeat": args.repeat, "stamp": stamp}
    (RESULTS / f"agents-{stamp}.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2)
    )
    first = rows[0]
    print(
        "| agents | empty play (s) | create, cold ledger (s) | create (s) | no-op rerun (s) "
        "| destroy (s) | create / 1 agent | destroy / 1 agent |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['agents']} | {r['empty']} | {r['cold']} | {r['warm']} | {r['noop']} | "
            f"{r['destroy']} | {r['warm'] / first['warm']:.2f}x | "
            f"{r['destroy'] / first['destroy']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
