"""RDMA (InfiniBand, RoCE) devices of an agent: the character devices the kernel's RDMA
stack makes under /dev/infiniband (uverbsN, rdma_cm, umadN, issmN). Session containers get
all of them when the agent has them (docs/environment.md#rdma-devices): unlike GPUs they
are shared, so placement does not count them."""

from __future__ import annotations

import os
import stat

RDMA_DIR = "/dev/infiniband"


def rdma_devices(root: str = RDMA_DIR) -> list[str]:
    """The character devices directly under ``root``, sorted; [] when there is none."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(root, name)
        try:
            if stat.S_ISCHR(os.stat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    return found


def device_mappings(paths: list[str]) -> list[str]:
    """Docker's ``devices`` entries: the same path inside, read-write-mknod."""
    return [f"{path}:{path}:rwm" for path in paths]
