"""GPU allocation: which device indices each session container gets, as pure functions.

- ``offered_gpus``: the devices an agent offers to sessions (the detected ones, else the
  inventory's declared count as simulated indices);
- ``allocate_devices``: which device indices each new container gets, given the devices
  that running containers already hold, never the same device twice;
- the label that records a container's devices (``LABEL_GPU_DEVICES``,
  ``ai.backend.cluster.gpu-devices``): ``parse_device_label``, ``format_device_label``,
  and ``devices_in_use`` over a set of containers' labels.

It reads the ``bai_gpu`` facts as plain dicts and does not import gpu_facts.py, so that
placement, admission, the ledger and the plan (on the controller) load no tool parsers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    GpuAllocationError,
    GpuError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_GPU_DEVICES
from ansible_collections.bai.cluster.plugins.module_utils.gpu.common import (
    STATUS_OK,
    VENDOR_NONE,
)

# --- What an agent offers to sessions ----------------------------------------------------
SOURCE_DETECTED = "detected"
SOURCE_DECLARED = "declared"
SOURCE_NONE = "none"


def offered_gpus(facts: Optional[Mapping[str, Any]], declared: Optional[int]) -> dict[str, Any]:
    """The GPU devices an agent offers to session containers.

    ``facts``: what ``detect`` found on the agent (``bai_gpu``); ``declared``: the
    inventory's ``bai_agent_resources.gpu`` (None when not given). The rule:

    - **Detected devices win** whenever detection finds usable ones: those indices are
      offered, whatever count the inventory declares (a differing count gets a warning,
      because a device that is not there cannot be given, and one that is there is
      offered: hold a GPU back from sessions by moving the agent to another resource
      group, not by a smaller count).
    - **Else the declared count** becomes anonymous indices ``0..K-1`` (``source``
      ``declared``). Placement counts them (this is how capacities are simulated where
      no GPU can exist), but a container given one cannot be created: the agent has no
      device to hand over, and ``bai_session_containers`` says so before creating
      anything.
    - Neither: no GPUs.

    Returns ``vendor``, ``devices`` (sorted indices), ``source`` and ``warning`` (None
    or a sentence for people).
    """
    facts = facts or {}
    usable = facts.get("status", STATUS_OK) == STATUS_OK
    detected = sorted({int(d["index"]) for d in facts.get("devices") or []}) if usable else []
    if declared is not None and (isinstance(declared, bool) or int(declared) < 0):
        raise GpuError(f"declared GPU count must be a whole number >= 0, got {declared!r}")
    if detected:
        vendor = str(facts.get("vendor"))
        warning = None
        if declared is not None and int(declared) != len(detected):
            warning = (
                f"bai_agent_resources.gpu declares {declared} GPU(s) but {len(detected)} "
                f"{vendor} GPU(s) were detected (devices {format_device_label(detected)}); "
                "the detected devices are offered"
            )
        return {
            "vendor": vendor,
            "devices": detected,
            "source": SOURCE_DETECTED,
            "warning": warning,
        }
    count = int(declared or 0)
    warning = None
    if count:
        why = facts.get("problem") or "no NVIDIA or AMD device was detected"
        warning = (
            f"bai_agent_resources.gpu declares {count} GPU(s) but {why}; placement counts "
            f"them as devices {format_device_label(range(count))} (simulated), and a "
            "container given one cannot be created on this agent"
        )
    return {
        "vendor": VENDOR_NONE,
        "devices": list(range(count)),
        "source": SOURCE_DECLARED if count else SOURCE_NONE,
        "warning": warning,
    }


# --- Allocation --------------------------------------------------------------------------
def parse_device_label(value: Any) -> list[int]:
    """Device indices from a LABEL_GPU_DEVICES value ("0,1"; "" or None: none). Tokens
    that are not whole numbers are skipped (a hand-edited label must not break placement)."""
    if value is None:
        return []
    found = []
    for token in str(value).split(","):
        token = token.strip()
        if token.isdigit():
            found.append(int(token))
    return sorted(set(found))


def format_device_label(indices: Iterable[int]) -> str:
    """The LABEL_GPU_DEVICES value for ``indices``: sorted, comma-joined, "" for none."""
    return ",".join(str(i) for i in sorted(set(int(i) for i in indices)))


def devices_in_use(containers_labels: Iterable[Mapping[str, str]]) -> set[int]:
    """Device indices held by containers, from their labels. Pass the labels of every
    session container of the agent, in any state: a session holds its devices until it
    is destroyed (module_utils/scheduling/placement/admission.py)."""
    used: set[int] = set()
    for labels in containers_labels:
        used.update(parse_device_label((labels or {}).get(LABEL_GPU_DEVICES)))
    return used


def _index_of(device: Any) -> int:
    if isinstance(device, Mapping):
        return int(device["index"])
    index = getattr(device, "index", None)  # a gpu_facts.GpuDevice (not imported here)
    if isinstance(index, int):
        return index
    return int(device)


def allocate_devices(
    devices: Iterable[Any],
    in_use: Iterable[int],
    requests: Mapping[str, int] | Sequence[tuple[str, int]],
    *,
    agent: str = "this agent",
) -> dict[str, list[int]]:
    """Pick devices for new containers on one agent, or raise ``GpuAllocationError``.

    ``devices``: the agent's devices (indices, gpu_facts' ``GpuDevice`` or ``bai_gpu.devices``
    dicts); ``in_use``: indices running containers hold (``devices_in_use``);
    ``requests``: container -> number of devices, in kernel order. Returns container
    -> sorted indices (``[]`` for 0). No device goes to two containers and none that is
    in use is given out. Larger requests choose first and take an adjacent run of
    indices where one is free (GPUs next to each other usually share a switch or
    NVLink), else the lowest free indices. Deterministic for the same input.
    """
    wanted = list(requests.items()) if isinstance(requests, Mapping) else list(requests)
    for name, count in wanted:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise GpuError(
                f"container {name}: GPU count must be a whole number >= 0, got {count!r}"
            )
    names = [name for name, _count in wanted]
    if len(set(names)) != len(names):
        raise GpuError(f"container names listed more than once: {names}")
    all_indices = sorted({_index_of(d) for d in devices})
    busy = set(in_use) & set(all_indices)
    free = [i for i in all_indices if i not in busy]
    need = sum(count for _name, count in wanted)
    if need > len(free):
        asked = ", ".join(f"{name}: {count}" for name, count in wanted if count)
        held = f"; in use: {format_device_label(busy)}" if busy else ""
        raise GpuAllocationError(
            f"{agent} has {len(free)} free GPU device(s) of {len(all_indices)} "
            f"(free: {format_device_label(free) or 'none'}{held}) but the containers "
            f"placed there need {need} ({asked})"
        )
    left = list(free)
    result: dict[str, list[int]] = {name: [] for name in names}
    # Biggest first (stable), so a 4-GPU container gets an adjacent run before 1-GPU
    # containers fragment the free list.
    for name, count in sorted(wanted, key=lambda item: -item[1]):
        if count == 0:
            continue
        chosen = _adjacent_run(left, count) or left[:count]
        result[name] = sorted(chosen)
        left = [i for i in left if i not in chosen]
    return result


def _adjacent_run(free: Sequence[int], count: int) -> Optional[list[int]]:
    """The lowest run of ``count`` consecutive indices in ``free`` (sorted), if any."""
    for start in range(len(free) - count + 1):
        window = list(free[start : start + count])
        if window[-1] - window[0] == count - 1:
            return window
    return None
