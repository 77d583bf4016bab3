"""All-reduce across the session with torch.distributed (gloo, CPU).

Launched by torchrun on every container; reads MASTER_ADDR/MASTER_PORT from the
environment the toolkit injected. Each rank contributes rank+1; every rank must end with
sum(1..world_size). Prints one line per rank for the test to check.
"""

import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t, op=dist.ReduceOp.SUM)
expected = world * (world + 1) / 2
print(
    f"rank={rank} world={world} host={socket.gethostname()} "
    f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
    f"sum={t.item():.0f} ok={t.item() == expected}",
    flush=True,
)
dist.destroy_process_group()
