"""Time session creation: the toolkit vs a naive playbook vs the Docker SDK floor.

For each size N, three ways to get N running containers with sshd up, on one engine
(-i inventories/local) and, with --lab, the toolkit across the lab's two agents (the
Docker connection, inventories/lab); --lab-ssh adds the same lab sessions over SSH as the
lab's sudo account (inventories/lab-ssh), row beside row:

  toolkit  playbooks/session_create.yml (plan, keys, network, one module call per agent
           creating its containers in parallel, the health gate), then session_destroy.yml
  naive    bench/naive_session.yml: community.docker.docker_container in a loop, one
           container per task item, then a wait for sshd (no keys, no env, no checks)
  sdk      the floor: this script creates the network and the containers straight
           through the Docker SDK, in parallel threads, and waits for sshd

Each point is the median of --repeat runs of wall-clock time (create only; removal is
timed separately for the toolkit). An empty play over the same inventory is timed beside
them: the fixed cost of starting ansible-playbook. Results go to
bench/results/<stamp>.json, a Markdown table to stdout and, when matplotlib is installed
(bench/requirements.txt), a PNG.

  .venv/bin/python bench/session_bench.py --sizes 1,2,4,8,16 --repeat 3 [--lab] [--lab-ssh]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
RESULTS = REPO / "bench" / "results"
IMAGE = "bai/session:latest"
READY = b"Server listening on"


def playbook(path: str, inventory: str | None, **extra) -> float:
    """Run a playbook quietly; return its wall-clock seconds (raise on failure)."""
    argv = [str(VENV_BIN / "ansible-playbook"), path, "-e", json.dumps(extra)]
    if inventory:
        argv[1:1] = ["-i", inventory]
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.null",
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
    }
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return took


def hosts(n: int) -> list[str]:
    return ["main1"] + [f"sub{i}" for i in range(1, n)]


EMPTY_PLAY = REPO / "bench" / "empty_play.yml"


def toolkit(n: int, inventory: str | None, extra: dict, repeat: int) -> dict[str, float]:
    """Medians over `repeat` runs of an empty play, create, the same create again (a
    no-op), destroy."""
    name = f"bench-tk{n}"
    spec = {"session_name": name, "session_size": n, **extra}
    runs = []
    for _run in range(repeat):
        empty = playbook(str(EMPTY_PLAY), inventory)
        made = playbook("playbooks/session_create.yml", inventory, **spec)
        again = playbook("playbooks/session_create.yml", inventory, **spec)
        gone = playbook("playbooks/session_destroy.yml", inventory, session_name=name)
        runs.append((empty, made, again, gone))
    empty, made, again, gone = (median(list(times)) for times in zip(*runs))
    return {
        "empty_s": empty,
        "toolkit_s": made,
        "toolkit_noop_s": again,
        "toolkit_destroy_s": gone,
    }


def naive(n: int) -> float:
    inv = "inventories/local"
    try:
        return playbook("bench/naive_session.yml", inv, naive_size=n, naive_name=f"bench-nv{n}")
    finally:
        playbook(
            "bench/naive_session.yml",
            inv,
            naive_size=n,
            naive_name=f"bench-nv{n}",
            naive_state="absent",
        )


def sdk_floor(n: int) -> float:
    import docker

    client = docker.from_env()
    api = client.api
    # Its own names each run: Docker 20.10 may keep a stale endpoint in a network whose
    # containers were removed at once ("has active endpoints" until dockerd restarts).
    name = f"bench-sdk{n}-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    start = time.perf_counter()
    net = api.create_network(f"{name}-net", driver="bridge", labels={"ai.backend.bench": name})

    def one(host: str) -> str:
        cid = api.create_container(
            IMAGE,
            name=f"{name}-{host}",
            hostname=host,
            detach=True,
            labels={"ai.backend.bench": name},
            host_config=api.create_host_config(
                network_mode=f"{name}-net",
                init=True,
                nano_cpus=500_000_000,
                mem_limit="256m",
                memswap_limit="256m",
            ),
            networking_config=api.create_networking_config(
                {f"{name}-net": api.create_endpoint_config(aliases=[host])}
            ),
        )["Id"]
        api.start(cid)
        while READY not in api.logs(cid):
            time.sleep(0.05)
        return cid

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(one, hosts(n)))
    took = time.perf_counter() - start
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda cid: api.remove_container(cid, force=True), ids))
    for attempt in range(20):
        try:
            api.remove_network(net["Id"])
            break
        except docker.errors.APIError as exc:
            if attempt == 19:
                print(f"left network {name}-net behind: {exc}", file=sys.stderr)
            time.sleep(0.25)
    client.close()
    return took


def lab_agent_mem_mib() -> int:
    """Memory one lab agent offers (bai_agent_resources.mem in inventories/lab), in MiB."""
    import yaml

    data = yaml.safe_load((REPO / "inventories/lab/group_vars/agents.yml").read_text())
    mem = str(data["bai_agent_resources"]["mem"]).lower()
    units = {"g": 1024, "m": 1}
    return int(float(mem[:-1]) * units[mem[-1]]) if mem[-1] in units else int(mem) >> 20


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--sizes", default="1,2,4,8,16")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lab", action="store_true", help="also time sessions across the lab")
    parser.add_argument(
        "--lab-ssh", action="store_true", help="with --lab, also over SSH (inventories/lab-ssh)"
    )
    parser.add_argument("--lab-sizes", default="2,4,8")
    parser.add_argument("--skip", default="", help="comma-separated: naive,sdk")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    skip = set(args.skip.split(","))
    local = {"session_resources": {"cpu": 0.5, "mem": "256m"}}
    rows = []
    for n in sizes:
        row = {"where": "local", "n": n, **toolkit(n, "inventories/local", local, args.repeat)}
        if "naive" not in skip:
            row["naive_s"] = median([naive(n) for _run in range(args.repeat)])
        if "sdk" not in skip:
            row["sdk_s"] = median([sdk_floor(n) for _run in range(args.repeat)])
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    if args.lab:
        # Each container asks a bit more than 1/N of one agent's memory, so no agent fits
        # the whole session and it must span both (a multi-node request that fits one
        # agent would collapse onto it). Memory limits are caps, not reservations.
        agent_mib = lab_agent_mem_mib()
        for n in [int(s) for s in args.lab_sizes.split(",") if s]:
            extra = {
                "session_mode": "multi-node",
                "session_resources": {"cpu": 0.25, "mem": f"{agent_mib // n + 64}m"},
            }
            ways = [("lab", None)] + ([("lab-ssh", "inventories/lab-ssh")] if args.lab_ssh else [])
            for where, inventory in ways:
                row = {"where": where, "n": n, **toolkit(n, inventory, extra, args.repeat)}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    meta = {"cpus": os.cpu_count(), "repeat": args.repeat, "stamp": stamp}
    (RESULTS / f"{stamp}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(
        "| where | N | empty play (s) | create (s) | no-op rerun (s) | destroy (s) "
        "| naive (s) | SDK floor (s) | create - empty play, in floors | naive / create |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        floors = f"{(r['toolkit_s'] - r['empty_s']) / r['sdk_s']:.2f}x" if r.get("sdk_s") else "-"
        speedup = f"{r['naive_s'] / r['toolkit_s']:.1f}x" if r.get("naive_s") else "-"
        print(
            f"| {r['where']} | {r['n']} | {r['empty_s']} | {r['toolkit_s']} | "
            f"{r['toolkit_noop_s']} | {r['toolkit_destroy_s']} | {r.get('naive_s', '-')} | "
            f"{r.get('sdk_s', '-')} | {floors} | {speedup} |"
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no PNG: pip install -r bench/requirements.txt for matplotlib)", file=sys.stderr)
        return 0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    local_rows = [r for r in rows if r["where"] == "local"]
    for key, label in (
        ("toolkit_s", "toolkit (one engine)"),
        ("naive_s", "naive playbook"),
        ("sdk_s", "Docker SDK floor"),
    ):
        points = [(r["n"], r[key]) for r in local_rows if key in r]
        if points:
            ax.plot(*zip(*points), marker="o", label=label)
    for where, label in (
        ("lab", "toolkit (lab, two agents, overlay)"),
        ("lab-ssh", "toolkit (lab over SSH + sudo)"),
    ):
        lab_rows = [r for r in rows if r["where"] == where]
        if lab_rows:
            ax.plot(
                [r["n"] for r in lab_rows],
                [r["toolkit_s"] for r in lab_rows],
                marker="s",
                linestyle="--",
                label=label,
            )
    ax.set_xlabel("containers in the session (N)")
    ax.set_ylabel("seconds until every sshd listens (median)")
    ax.set_title(f"Session creation, {os.cpu_count()} CPUs, median of {args.repeat}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png = RESULTS / f"{stamp}.png"
    fig.savefig(png, dpi=110)
    print(f"plot: {png.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
