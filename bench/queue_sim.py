"""Queue policy simulation (issue 46): a synthetic trace replayed over virtual agents with
the toolkit's own placement, for FIFO vs priority vs priority + backfill.

    .venv/bin/python bench/queue_sim.py [--sessions 2000] [--agents 16] [--seed 1]

Nothing runs on an engine: an event loop (arrivals, ends) runs one scheduler pass after
each event, placing with module_utils/scheduling/placement.place as the ledger does.

- **FIFO**: today's rule (scheduling/queue/scheduler.py): submission order; a
  session that does not fit claims the agents it could use, and those behind it start
  only on agents nobody ahead claims.
- **priority**: the same pass in priority order (module_utils/scheduling/queue/priority.py,
  default weights: age, fair share with a 7-day half-life).
- **priority + backfill**: as priority, and a session that fits only on claimed agents
  starts there when it ends before the earliest start of every session claiming them
  (module_utils/scheduling/queue/backfill.py, a 60 s margin).

The trace: 16 agents of 32 CPUs; four owners, one of whom (sweeps) submits half of the
sessions in bursts of 50; sizes of 1 to 8 containers of 2 to 16 CPUs; lifetimes of 10 min
to 8 h, each session running 20-100 % of its lifetime; arrivals offering 90 % of the
capacity (--load). Prints utilisation, and the mean and p95 wait per owner, as a Markdown
table.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
import time
from dataclasses import dataclass, field, replace

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    PlacementRequest,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    Waiting,
    could_use,
    take,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import backfill as bf
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import priority as prio
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    MODE_MULTI,
    MODE_SINGLE,
    Kernel,
    Resources,
)

GIB = 2**30
GROUP = "default"
MARGIN_S = 60.0
POLICIES = ("FIFO", "priority", "priority + backfill")


@dataclass
class Job:
    name: str
    owner: str
    submitted: float
    kernels: tuple[Kernel, ...]
    mode: str
    lifetime: float
    runtime: float
    started: float | None = None
    agents: dict[str, tuple[float, int]] = field(default_factory=dict)  # agent -> CPUs, mem

    @property
    def cpus(self) -> float:
        return sum(k.resources.cpu for k in self.kernels)


def trace(count: int, agents: int, seed: int, load: float = 0.9) -> list[Job]:
    rng = random.Random(seed)
    jobs: list[Job] = []
    capacity = agents * 32.0
    t = 0.0
    while len(jobs) < count:
        burst = rng.random() < 0.02  # sweeps: 50 at once
        owner = "sweeps" if burst else rng.choice(["alice", "bob", "carol"])
        for _member in range(50 if burst else 1):
            n = rng.choices([1, 2, 4, 8], [60, 20, 15, 5])[0]
            cpu = float(rng.choice([2, 4, 8, 16]))
            lifetime = float(rng.choice([600, 1800, 3600, 7200, 14400, 28800]))
            kernels = tuple(
                Kernel("main" if i == 0 else "sub", i + 1, f"h{i}", i, "img",
                       Resources(cpu, GIB, 0))
                for i in range(n)
            )  # fmt: skip
            jobs.append(
                Job(
                    f"s{len(jobs)}", owner, t, kernels, MODE_MULTI if n > 1 else MODE_SINGLE,
                    lifetime, lifetime * rng.uniform(0.2, 1.0),
                )
            )  # fmt: skip
        # Arrivals that offer about LOAD of the cluster's capacity: the mean gap between
        # sessions is their mean work over LOAD * capacity (a burst moves on by 50 gaps).
        mean_work = statistics.fmean(j.cpus * j.runtime for j in jobs[-200:])
        t += rng.expovariate(load * capacity / mean_work) * (50 if burst else 1)
    return jobs[:count]


def run(jobs: list[Job], agents: int, policy: str) -> dict:
    jobs = [replace(j, agents={}) for j in jobs]
    free = [Agent(f"a{i}", GROUP, 32.0, 256 * GIB, 0) for i in range(agents)]
    events = [(j.submitted, 1, j.name) for j in jobs]
    heapq.heapify(events)
    by_name = {j.name: j for j in jobs}
    queue: list[Job] = []
    running: dict[str, Job] = {}
    usage: dict[str, dict[str, float]] = {}
    weights = prio.Weights(priority=0)
    began = time.process_time()
    while events:
        now, kind, name = heapq.heappop(events)
        job = by_name[name]
        if kind == 1:
            queue.append(job)
        else:
            running.pop(name)
            free = [_release(a, job) for a in free]
            usage = prio.charge(usage, job.owner, prio.accrued(job.cpus, job.started, now,
                                weights.half_life_s), now, weights.half_life_s)  # fmt: skip
        for started in _pass(queue, free, running, now, policy, usage, weights):
            placement, job = started
            free = take(free, _waiting(job, 0), placement)
            job.started = now
            for kernel in job.kernels:
                agent = placement.assignment[kernel.hostname]
                cpu, mem = job.agents.get(agent, (0.0, 0))
                job.agents[agent] = (cpu + kernel.resources.cpu, mem + kernel.resources.mem)
            running[job.name] = job
            queue.remove(job)
            heapq.heappush(events, (now + job.runtime, 0, job.name))
    return _report(jobs, agents, time.process_time() - began)


def _release(agent: Agent, job: Job) -> Agent:
    if agent.name not in job.agents:
        return agent
    cpu, mem = job.agents[agent.name]
    return replace(agent, used_cpu=round(agent.used_cpu - cpu, 6), used_mem=agent.used_mem - mem)


def _waiting(job: Job, order: float) -> Waiting:
    return Waiting(job.name, GROUP, job.mode, job.kernels, order, 0, job.owner)


def _pass(queue, free, running, now, policy, usage, weights):
    """The sessions one pass starts: [(placement, job)]."""
    if policy == "FIFO":
        order = sorted(queue, key=lambda j: (j.submitted, j.name))
    else:
        found = prio.usage(
            usage, [(j.owner, j.cpus, j.started) for j in running.values()], now,
            weights.half_life_s,
        )  # fmt: skip
        shares = {j.owner: 1.0 for j in [*queue, *running.values()]}
        keyed = [
            (prio.order_key(prio.factors(now - j.submitted, j.owner, found, shares, 0,
                                         weights).priority, False, j.submitted, 0, j.name), j)
            for j in queue
        ]  # fmt: skip
        order = [j for _key, j in sorted(keyed, key=lambda kj: kj[0])]
    entries = [
        bf.Running(agent, cpu, mem, ends_at=j.started + j.lifetime)
        for j in running.values()
        for agent, (cpu, mem) in j.agents.items()
    ]
    claimed: dict[str, str] = {}
    shadow: dict[str, float | None] = {}
    starts = []
    for job in order:
        session = _waiting(job, 0)
        unclaimed = [a for a in free if a.name not in claimed]
        placement = _try(job, unclaimed)
        if placement is None and policy.endswith("backfill") and claimed:
            placement = _try(job, free)
            if placement is not None:
                blockers = {claimed[a] for a in placement.agents if a in claimed}
                for blocker in blockers - set(shadow):
                    head = next(j for j in order if j.name == blocker)
                    ask = PlacementRequest(head.kernels, head.mode, GROUP)
                    shadow[blocker] = bf.earliest_start(ask, free, entries, now)
                ends_in_time = (bf.may_backfill(job.lifetime, shadow[b], now, MARGIN_S)
                                for b in blockers)  # fmt: skip
                if not all(ends_in_time):
                    placement = None
        if placement is None:
            for agent in free:
                if could_use(session, agent):
                    claimed.setdefault(agent.name, job.name)
            continue
        free = take(free, session, placement)
        for kernel in job.kernels:
            where = placement.assignment[kernel.hostname]
            held = kernel.resources
            entries.append(bf.Running(where, held.cpu, held.mem, ends_at=now + job.lifetime))
        starts.append((placement, job))
    return starts


def _try(job: Job, agents):
    try:
        return place(PlacementRequest(job.kernels, job.mode, GROUP), agents)
    except Pending:
        return None


def _report(jobs: list[Job], agents: int, cpu_s: float) -> dict:
    first = min(j.submitted for j in jobs)
    last = max(j.started + j.runtime for j in jobs)
    work = sum(j.cpus * j.runtime for j in jobs)
    waits: dict[str, list[float]] = {}
    for j in jobs:
        waits.setdefault(j.owner, []).append(j.started - j.submitted)
        waits.setdefault("all", []).append(j.started - j.submitted)
    return {
        "utilisation": work / (agents * 32.0 * (last - first)),
        "makespan_h": (last - first) / 3600,
        "waits": {o: (statistics.fmean(w), _p95(w)) for o, w in waits.items()},
        "cpu_s": cpu_s,
    }


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", type=float, default=0.9, help="offered load (0.9: 90 %%)")
    args = parser.parse_args(argv)
    jobs = trace(args.sessions, args.agents, args.seed, args.load)
    owners = sorted({j.owner for j in jobs})
    per_owner = ", ".join(f"{o} {sum(j.owner == o for j in jobs)}" for o in owners)
    print(f"{args.sessions} sessions ({per_owner}), {args.agents} agents of 32 CPUs, "
          f"offered load {args.load:.0%}, seed {args.seed}\n")  # fmt: skip
    head = "| policy | utilisation | makespan | " + " | ".join(
        f"{o} mean / p95 wait" for o in [*owners, "all"]
    )
    print(head + " | decide CPU |")
    print("|" + "---|" * (5 + len(owners)))
    for policy in POLICIES:
        got = run(jobs, args.agents, policy)
        cells = [
            f"{got['waits'][o][0] / 60:.0f} / {got['waits'][o][1] / 60:.0f} min"
            for o in [*owners, "all"]
        ]
        print(f"| {policy} | {got['utilisation']:.1%} | {got['makespan_h']:.1f} h | "
              + " | ".join(cells) + f" | {got['cpu_s']:.0f} s |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
