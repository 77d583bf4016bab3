"""What an agent offers and what its session containers were given (docs/placement.md):
capacity from the engine or the inventory's ``bai_agent_resources``, use from the
containers' labels. Placement, admission on the agent and the ledger's kept reads all
count with these; nothing here places anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_CPU,
    LABEL_GPU,
    LABEL_MEM,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import (
    parse_count,
    parse_cpu,
    parse_mem,
    reject_unknown,
    require_mapping,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import ZERO, Resources
from ansible_collections.bai.cluster.plugins.module_utils.session.resources import RESOURCE_KEYS


def agent_capacity(override: Mapping[str, Any] | None, *, ncpu: int, mem_total: int) -> Resources:
    """What an agent offers to sessions: the inventory's ``bai_agent_resources`` where
    given (any of cpu, mem, gpu), else what the engine reports (GPUs: 0)."""
    reported = Resources(float(ncpu), int(mem_total), 0)
    if not override:
        return reported
    raw = require_mapping(override, "bai_agent_resources")
    reject_unknown(raw, RESOURCE_KEYS, "bai_agent_resources")
    given = {key: value for key, value in raw.items() if value is not None}
    cpu = reported.cpu
    if "cpu" in given:
        cpu = parse_cpu(given["cpu"], "bai_agent_resources.cpu")
    mem = reported.mem
    if "mem" in given:
        mem = parse_mem(given["mem"], "bai_agent_resources.mem")
    gpu = 0
    if "gpu" in given:
        gpu = parse_count(given["gpu"], "bai_agent_resources.gpu", minimum=0)
    return Resources(cpu, mem, gpu)


def used_from_labels(containers_labels: Iterable[Mapping[str, str]]) -> Resources:
    """Sum what running session containers were given, from their labels.

    Pass the labels of *running* containers only. Containers without LABEL_CPU,
    LABEL_MEM and LABEL_GPU (not made by this toolkit) are skipped; a label that does
    not parse counts as 0 for that resource rather than breaking every placement.
    """
    total = ZERO
    for labels in containers_labels:
        if not all(key in labels for key in (LABEL_CPU, LABEL_MEM, LABEL_GPU)):
            continue
        total = total + Resources(
            label_float(labels[LABEL_CPU]),
            int(label_float(labels[LABEL_MEM])),
            int(label_float(labels[LABEL_GPU])),
        )
    return total


def label_float(text: str) -> float:
    """A non-negative finite number from a label, else 0."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0
