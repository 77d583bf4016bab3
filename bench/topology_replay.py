"""Topology replay (issue 63): a synthetic trace over simulated agents in racks, placed
by today's placement and by the topology rule (every gang inside one rack).

    .venv/bin/python bench/topology_replay.py [--sessions 500] [--agents 64] [--racks 8]

Nothing runs on an engine. The trace is bench/queue_sim.py's (sizes of 1 to 8 containers
of 2 to 16 CPUs, lifetimes of 10 min to 8 h, arrivals offering 90 % of the capacity); an
event loop runs one FIFO scheduler pass after each arrival and end, placing with
module_utils/scheduling/placement.place as the ledger does, and a session that does not
fit claims the agents it could use, as scheduling/queue/scheduler.py does. With
``topology``, a session of more than one container asks for one rack (the ``topology``
constraint the rule reads). Prints a Markdown table:

- gangs that span racks (with topology this must be 0, whatever the load);
- gangs inside one rack, of all gangs;
- whole racks free: the time-weighted mean number of racks whose agents run nothing;
- the mean wait of the 8-container gangs, and of every session;
- one pass's time over a queue of 1,000 with every agent busy (nothing starts).

A gang that is admitted but cannot be placed cannot happen here by construction: a
session starts only with a placement of every member (``place`` places all or raises
Pending), which is what the ledger's pass does too.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
import time
from dataclasses import replace

import queue_sim as qs
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    PlacementRequest,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.topology import (
    TOPOLOGY,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    could_use,
    take,
)

GIB = 2**30


def agents_in_racks(count: int, racks: int) -> list[Agent]:
    per_rack = max(1, count // racks)
    return [
        Agent(f"a{i:03d}", qs.GROUP, 32.0, 256 * GIB, 0, labels=(("rack", f"r{i // per_rack}"),))
        for i in range(count)
    ]


def request(job: qs.Job, topology: bool) -> PlacementRequest:
    wants = topology and len(job.kernels) > 1
    constraints = ((TOPOLOGY, "rack"),) if wants else ()
    return PlacementRequest(job.kernels, job.mode, qs.GROUP, constraints)


def one_pass(queue: list[qs.Job], free: list[Agent], topology: bool):
    """FIFO: the sessions this pass starts, [(placement, job)], and the agents after."""
    claimed: set[str] = set()
    starts = []
    for job in sorted(queue, key=lambda j: (j.submitted, j.name)):
        unclaimed = [a for a in free if a.name not in claimed]
        try:
            placement = place(request(job, topology), unclaimed)
        except Pending:
            session = qs._waiting(job, 0)
            claimed.update(a.name for a in free if could_use(session, a))
            continue
        free = take(free, qs._waiting(job, 0), placement)
        starts.append((placement, job))
    return starts, free


def run(jobs: list[qs.Job], agents: int, racks: int, topology: bool) -> dict:
    jobs = [replace(j, agents={}) for j in jobs]
    free = agents_in_racks(agents, racks)
    rack_of = {a.name: a.label("rack") for a in free}
    events = [(j.submitted, 1, j.name) for j in jobs]
    heapq.heapify(events)
    by_name = {j.name: j for j in jobs}
    queue: list[qs.Job] = []
    spans = in_one = gangs = 0
    racks_free_s = 0.0
    last = jobs[0].submitted
    while events:
        now, kind, name = heapq.heappop(events)
        busy = {rack_of[a.name] for a in free if a.used_cpu > 0}
        racks_free_s += (racks - len(busy)) * (now - last)
        last = now
        job = by_name[name]
        if kind == 1:
            queue.append(job)
        else:
            free = [qs._release(a, job) for a in free]
        starts, free = one_pass(queue, free, topology)
        for placement, started in starts:
            started.started = now
            for kernel in started.kernels:
                where = placement.assignment[kernel.hostname]
                cpu, mem = started.agents.get(where, (0.0, 0))
                started.agents[where] = (cpu + kernel.resources.cpu, mem + kernel.resources.mem)
            if len(started.kernels) > 1:
                gangs += 1
                used = {rack_of[a] for a in placement.agents}
                spans += len(used) > 1
                in_one += len(used) == 1
            queue.remove(started)
            heapq.heappush(events, (now + started.runtime, 0, started.name))
    first = jobs[0].submitted
    big = [j.started - j.submitted for j in jobs if len(j.kernels) == 8]
    return {
        "spans": spans,
        "in_one": in_one / gangs if gangs else 1.0,
        "racks_free": racks_free_s / (last - first) if last > first else float(racks),
        "big_wait": statistics.fmean(big) if big else 0.0,
        "wait": statistics.fmean(j.started - j.submitted for j in jobs),
    }


def pass_ms(jobs: list[qs.Job], agents: int, racks: int, topology: bool, depth: int) -> float:
    """One pass over ``depth`` queued sessions with every agent busy, best of 3 (ms)."""
    busy = [replace(a, used_cpu=31.0) for a in agents_in_racks(agents, racks)]
    queue = (jobs * (depth // len(jobs) + 1))[:depth]
    best = float("inf")
    for _try in range(3):
        began = time.perf_counter()
        one_pass(queue, busy, topology)
        best = min(best, time.perf_counter() - began)
    return best * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--racks", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--depth", type=int, default=1000)
    args = parser.parse_args(argv)
    jobs = qs.trace(args.sessions, args.agents, args.seed, args.load)
    print(
        f"{args.sessions} sessions over {args.agents} agents of 32 CPUs in {args.racks} racks, "
        f"offered load {args.load:.0%}, seed {args.seed}\n"
    )
    print(
        "| placement | gangs spanning racks | gangs in one rack | whole racks free (mean) "
        "| 8-container gangs' mean wait | mean wait | pass at queue depth "
        f"{args.depth} |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, topology in (("today", False), ("topology: rack", True)):
        got = run(jobs, args.agents, args.racks, topology)
        ms = pass_ms(jobs, args.agents, args.racks, topology, args.depth)
        print(
            f"| {label} | {got['spans']} | {got['in_one']:.1%} | {got['racks_free']:.2f} "
            f"| {got['big_wait'] / 60:.0f} min | {got['wait'] / 60:.0f} min | {ms:.0f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
