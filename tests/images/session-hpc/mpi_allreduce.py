"""All-reduce across the session with MPI (mpi4py over Open MPI's TCP transport).

Started by mpirun on main1, which reaches the other containers over the session's SSH
mesh. Each rank contributes rank+1; every rank must end with sum(1..size).
"""

import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1, op=MPI.SUM)
print(
    f"rank={rank} size={size} host={socket.gethostname()} sum={total} "
    f"ok={total == size * (size + 1) // 2}",
    flush=True,
)
