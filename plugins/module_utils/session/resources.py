"""A container's resources as a person writes them (``cpu``, ``mem``, ``gpu``, ``shm``).

The numbers themselves are read by common/parse.py; this file knows what a container's
resources are and what Docker accepts of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import (
    parse_count,
    parse_cpu,
    parse_mem,
    reject_unknown,
    require_mapping,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import Resources, format_mem

# Docker refuses memory limits below 6 MiB; say so before Docker does.
MIN_MEM = 6 * 1024**2
RESOURCE_KEYS = ("cpu", "mem", "gpu", "shm")
# The smallest /dev/shm worth asking for.
MIN_SHM = 1024**2


def parse_resources(
    raw: Mapping[str, Any] | None,
    default: Resources | None = None,
    field_name: str = "resources",
) -> Resources:
    """Resources of one container. Keys missing from ``raw`` come from ``default``
    (cpu 1, mem 1g, gpu 0 when no default is given), so a role can override only what
    differs from the session level."""
    base = default or Resources(1.0, 1024**3, 0)
    if raw is None:
        return base
    raw = require_mapping(raw, field_name)
    reject_unknown(raw, RESOURCE_KEYS, field_name)
    given = {key: value for key, value in raw.items() if value is not None}
    cpu = parse_cpu(given["cpu"], f"{field_name}.cpu") if "cpu" in given else base.cpu
    mem = parse_mem(given["mem"], f"{field_name}.mem") if "mem" in given else base.mem
    if mem < MIN_MEM:
        raise SpecError(
            f"{field_name}.mem: got {format_mem(mem)} ({mem} bytes); Docker needs at "
            f"least 6m per container"
        )
    gpu = base.gpu
    if "gpu" in given:
        gpu = parse_count(given["gpu"], f"{field_name}.gpu", minimum=0)
    shm = parse_mem(given["shm"], f"{field_name}.shm") if "shm" in given else base.shm
    if shm is not None and not MIN_SHM <= shm <= mem:
        raise SpecError(
            f"{field_name}.shm: got {format_mem(shm)} ({shm} bytes); /dev/shm is part of "
            f"the container's memory, so it must lie between 1m and mem ({format_mem(mem)})"
        )
    return Resources(cpu, mem, gpu, shm)
