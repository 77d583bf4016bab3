"""Topology replay (issue 63): a synthetic trace over simulated agents in racks, placed
by today's placement, by the topology rule (every gang inside one rack), and by a
preferred rack (``--prefer`` seconds in the queue, then any agents).

    .venv/bin/python bench/topology_replay.py [--sessions 500] [--agents 64] [--racks 8]
        [--prefer 600]

Nothing runs on an engine. The trace is bench/queue_sim.py's (sizes of 1 to 8 containers
of 2 to 16 CPUs, lifetimes of 10 min to 8 h, arrivals offering 90 % of the capacity); an
event loop runs one FIFO scheduler pass after each arrival and end, placing with
module_utils/scheduling/placement.place as the ledger does, and a session that does not
fit claims the agents it could use (scheduling/queue/scheduler.py: could_use, which
knows its topology level). With a topology, a session of more than one container asks
for one rack (the ``topology`` constraint the rule reads); preferred, a pass places it by
the level its wait has widened it to (session/topology_request.py: widening), trying one
rack first. Prints a Markdown table:

- gangs that span racks (required: must be 0, whatever the load);
- gangs placed in one rack when an offline search says one existed: of the gang starts
  where the agents the gang could use (those no session ahead of it claimed) had a rack
  with room for it - an exact count, the gangs' containers being alike - those that
  started inside one rack (the issue asks >= 95 %);
- whole racks free: the time-weighted mean number of racks whose agents run nothing;
- the mean wait of the 8-container gangs, and of every session;
- the real scheduler pass's time (queue/scheduler.py: schedule) over a queue of 1,000
  with every agent busy (nothing starts).

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
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue import (
    Waiting,
    could_use,
    schedule,
    take,
)

GIB = 2**30


def agents_in_racks(count: int, racks: int) -> list[Agent]:
    per_rack = max(1, count // racks)
    return [
        Agent(f"a{i:03d}", qs.GROUP, 32.0, 256 * GIB, 0, labels=(("rack", f"r{i // per_rack}"),))
        for i in range(count)
    ]


# The modes: today (no topology), a required rack, a rack preferred for --prefer seconds.
TODAY, REQUIRED, PREFERRED = "today", "topology: rack", "preferred rack"
LEVELS = ("rack",)


def waiting(job: qs.Job, mode: str, prefer_s: int, now: float) -> Waiting:
    """The queued session a pass at ``now`` places: its level widened by its wait."""
    session = qs._waiting(job, job.submitted)
    if mode == TODAY:
        return session
    if len(job.kernels) < 2:  # no level: packed into the tightest rack that holds it
        return session.widened(now, LEVELS)
    asked = replace(session, topology="rack", prefer_s=prefer_s if mode == PREFERRED else 0)
    return asked.widened(now, LEVELS)


def rack_existed(job: qs.Job, agents: list[Agent]) -> bool:
    """Offline, exact for alike containers: some rack whose agents' free room holds every
    container of ``job`` (each agent holds as many as its CPUs and memory allow)."""
    need = job.kernels[0].resources
    held: dict[str, int] = {}
    for agent in agents:
        free = agent.free
        fits = min(int(free.cpu // need.cpu), int(free.mem // need.mem) if need.mem else 99)
        rack = agent.label("rack") or ""
        held[rack] = held.get(rack, 0) + max(fits, 0)
    return any(n >= len(job.kernels) for n in held.values())


def one_pass(queue: list[qs.Job], free: list[Agent], mode: str, prefer_s: int, now: float):
    """FIFO: the sessions this pass starts, [(placement, job, rack existed)], and the
    agents after."""
    claimed: set[str] = set()
    starts = []
    for job in sorted(queue, key=lambda j: (j.submitted, j.name)):
        session = waiting(job, mode, prefer_s, now)
        unclaimed = [a for a in free if a.name not in claimed]
        try:
            placement = place(session.request, unclaimed)
        except Pending:
            claimed.update(a.name for a in free if could_use(session, a))
            continue
        existed = len(job.kernels) > 1 and rack_existed(job, unclaimed)
        free = take(free, session, placement)
        starts.append((placement, job, existed))
    return starts, free


def run(jobs: list[qs.Job], agents: int, racks: int, mode: str, prefer_s: int) -> dict:
    jobs = [replace(j, agents={}) for j in jobs]
    free = agents_in_racks(agents, racks)
    rack_of = {a.name: a.label("rack") for a in free}
    events = [(j.submitted, 1, j.name) for j in jobs]
    heapq.heapify(events)
    by_name = {j.name: j for j in jobs}
    queue: list[qs.Job] = []
    spans = gangs = existed = kept = 0
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
        starts, free = one_pass(queue, free, mode, prefer_s, now)
        for placement, started, rack_was_there in starts:
            started.started = now
            for kernel in started.kernels:
                where = placement.assignment[kernel.hostname]
                cpu, mem = started.agents.get(where, (0.0, 0))
                started.agents[where] = (cpu + kernel.resources.cpu, mem + kernel.resources.mem)
            if len(started.kernels) > 1:
                gangs += 1
                one_rack = len({rack_of[a] for a in placement.agents}) == 1
                spans += not one_rack
                existed += rack_was_there
                kept += rack_was_there and one_rack
            queue.remove(started)
            heapq.heappush(events, (now + started.runtime, 0, started.name))
    first = jobs[0].submitted
    big = [j.started - j.submitted for j in jobs if len(j.kernels) == 8]
    return {
        "spans": spans,
        "kept": kept / existed if existed else 1.0,
        "existed": existed,
        "racks_free": racks_free_s / (last - first) if last > first else float(racks),
        "big_wait": statistics.fmean(big) if big else 0.0,
        "wait": statistics.fmean(j.started - j.submitted for j in jobs),
    }


def pass_ms(jobs: list[qs.Job], agents: int, racks: int, mode: str, depth: int) -> float:
    """The real scheduler pass (scheduling/queue/scheduler.py: schedule) over ``depth``
    queued sessions with every agent busy, best of 5 (ms)."""
    busy = [replace(a, used_cpu=31.0) for a in agents_in_racks(agents, racks)]
    jobs = (jobs * (depth // len(jobs) + 1))[:depth]
    waited = 60.0  # a preferred session still waits for its rack
    queue = [
        replace(waiting(j, mode, 600, j.submitted + waited), name=f"q{i}", seq=i)
        for i, j in enumerate(jobs)
    ]
    best = float("inf")
    for _try in range(5):
        began = time.perf_counter()
        schedule(queue, busy)
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
    parser.add_argument("--prefer", type=int, default=600)
    args = parser.parse_args(argv)
    jobs = qs.trace(args.sessions, args.agents, args.seed, args.load)
    print(
        f"{args.sessions} sessions over {args.agents} agents of 32 CPUs in {args.racks} racks, "
        f"offered load {args.load:.0%}, seed {args.seed}\n"
    )
    print(
        "| placement | gangs spanning racks | in one rack when one existed | whole racks "
        "free (mean) | 8-container gangs' mean wait | mean wait | pass at queue depth "
        f"{args.depth} |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode in (TODAY, REQUIRED, PREFERRED):
        got = run(jobs, args.agents, args.racks, mode, args.prefer)
        ms = pass_ms(jobs, args.agents, args.racks, mode, args.depth)
        label = f"{mode} ({args.prefer // 60} min)" if mode == PREFERRED else mode
        print(
            f"| {label} | {got['spans']} | {got['kept']:.1%} of {got['existed']} "
            f"| {got['racks_free']:.2f} | {got['big_wait'] / 60:.0f} min "
            f"| {got['wait'] / 60:.0f} min | {ms:.0f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
