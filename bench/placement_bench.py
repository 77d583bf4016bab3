"""Placement benchmark: the pure function (no I/O) over many agents.

    .venv/bin/python bench/placement_bench.py [--agents 100,1000,10000] [--repeat 5]

Prints a Markdown table of the best of --repeat runs, in milliseconds, for a single-node
session of 4 and multi-node sessions of 16 and 64 spread over agents that are busy to
different degrees, with fresh Agent objects each run (nothing cached between runs). The
reservation ledger's adjustment of the agents' reads (scheduling/ledger/usage.py) is timed
with it, over a ledger of one reservation per agent.
"""

from __future__ import annotations

import argparse
import time

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document, usage
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    PlacementRequest,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import (
    agents_from_info,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
)

GI = 1024**3
CASES = (("single-node", 4, 4), ("multi-node", 16, 4), ("multi-node", 64, 2))


def reads(count: int) -> list[dict]:
    """bai_agent_info results for COUNT agents of 16 CPUs, each with some CPUs in use."""
    return [
        {
            "agent": {
                "name": f"agent{i:05d}",
                "group": "default",
                "cpu": 16,
                "mem": 64 * GI,
                "gpu": 0,
                "used_cpu": float(i % 16),
                "used_mem": 0,
                "used_gpu": 0,
                "gpu_devices": [],
                "gpu_in_use": [],
            },
            "sessions": {},
            "read_at": 0.0,
        }
        for i in range(count)
    ]


def ledger_for(count: int) -> document.Ledger:
    ledger = document.empty()
    for i in range(count):
        ledger.sessions[f"s{i}"] = document.Reservation.from_dict(
            {
                "name": f"s{i}",
                "session_id": f"id{i}",
                "state": document.CREATING,
                "expires_at": 1e12,
                "kernels": [
                    {
                        "host": "main1",
                        "agent": f"agent{i:05d}",
                        "cpu": 0.0,
                        "mem": 0,
                        "gpu": 0,
                        "gpu_devices": [],
                    }
                ],
            }
        )
    return ledger


def best_ms(run, repeat: int, setup=lambda: None) -> float:
    """Best of REPEAT timings of run(setup()), setup untimed."""
    times = []
    for _attempt in range(repeat):
        given = setup()
        start = time.perf_counter()
        run(given)
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="100,1000,10000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print("| agents | session | place (ms) | parse the reads (ms) | ledger adjustment (ms) |")
    print("|---|---|---|---|---|")
    for count in (int(n) for n in args.agents.split(",")):
        raw = reads(count)
        ledger = ledger_for(count)

        def parsed(raw: list[dict] = raw) -> list:
            return agents_from_info(None, None, raw)[0] or []

        read = [AgentRead.of(r) for r in raw]
        parse_ms = best_ms(lambda _none: parsed(), args.repeat)
        adjust_ms = best_ms(lambda _none, r=read, b=ledger: usage.adjust(r, b), args.repeat)
        for mode, size, cpu in CASES:
            kernels = expand_kernels(
                normalize_spec({"name": "b", "size": size, "mode": mode, "resources": {"cpu": cpu}})
            )

            def placed(agents: list, kernels: tuple = tuple(kernels), mode: str = mode) -> None:
                place(PlacementRequest(kernels, mode, "default"), agents)

            place_ms = best_ms(placed, args.repeat, setup=parsed)  # fresh agents each run
            times = " | ".join(f"{ms:.1f}" for ms in (place_ms, parse_ms, adjust_ms))
            print(f"| {count} | {mode} x{size} | {times} |")


if __name__ == "__main__":
    main()
