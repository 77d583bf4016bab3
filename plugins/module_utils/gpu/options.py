"""GPU containers: the Docker options and environment that give a container its GPUs.

``docker_gpu_options``: the ``create_host_config`` keyword arguments that hand a
container exactly its devices: an NVIDIA device request (the ``--gpus`` path) or CDI
device names, or AMD's ``/dev/kfd`` and render nodes with the groups that own them.
``gpu_env``: the variables every session container gets. The facts (``bai_gpu``, from
gpu_facts.py) come in as plain dicts; the indices are what gpu_alloc.py chose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import GpuError
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import format_device_label
from ansible_collections.bai.cluster.plugins.module_utils.gpu.common import (
    VENDOR_AMD,
    VENDOR_NVIDIA,
)


def cdi_name(index: int, kind: str = "nvidia.com/gpu") -> str:
    """The CDI device name ``nvidia-ctk cdi generate`` gives GPU ``index``."""
    return f"{kind}={index}"


def docker_gpu_options(
    facts: Mapping[str, Any], indices: Sequence[int], *, method: str = "device_request"
) -> dict[str, Any]:
    """Keyword arguments for docker SDK ``APIClient.create_host_config`` that give a
    container exactly ``indices`` of the agent described by ``facts`` (``bai_gpu``).

    NVIDIA, ``method="device_request"`` (any engine >= 19.03, the ``--gpus`` path):
    ``device_requests=[{"driver": "nvidia", "device_ids": ["0", "1"],
    "capabilities": [["gpu"]]}]``. ``method="cdi"`` (engine >= 25 with CDI enabled):
    ``device_requests=[{"driver": "cdi", "device_ids": ["nvidia.com/gpu=0", ...]}]``,
    what ``docker run --device nvidia.com/gpu=0`` sends. AMD: the device nodes
    (``/dev/kfd`` and each GPU's render node) and the groups that own them. No
    indices, or no accelerator: ``{}``.
    """
    wanted = sorted(set(int(i) for i in indices))
    if not wanted:
        return {}
    vendor = facts.get("vendor")
    known = {int(d["index"]): d for d in facts.get("devices") or []}
    missing = [i for i in wanted if i not in known]
    if missing:
        raise GpuError(
            f"GPU device(s) {format_device_label(missing)} are not among this agent's "
            f"devices ({format_device_label(known) or 'none'})"
        )
    if vendor == VENDOR_NVIDIA:
        if method == "cdi":
            return {
                "device_requests": [{"driver": "cdi", "device_ids": [cdi_name(i) for i in wanted]}]
            }
        if method != "device_request":
            raise GpuError(f"method: got {method!r}; allowed: device_request, cdi")
        return {
            "device_requests": [
                {
                    "driver": "nvidia",
                    "device_ids": [str(i) for i in wanted],
                    "capabilities": [["gpu"]],
                }
            ]
        }
    if vendor == VENDOR_AMD:
        nodes = ["/dev/kfd"] + [str(known[i]["render_node"]) for i in wanted]
        groups = facts.get("groups") or {}
        return {
            "devices": [f"{node}:{node}:rwm" for node in nodes],
            "group_add": [str(gid) for _group, gid in sorted(groups.items())],
        }
    raise GpuError(f"this agent has no usable accelerator (vendor {vendor!r})")


def gpu_env(vendor: str, count: int) -> dict[str, str]:
    """Variables every session container gets (Backend.AI's names): ``GPU_COUNT`` and
    ``N_GPUS`` (0 when none). On an NVIDIA agent a container without GPUs also gets
    ``NVIDIA_VISIBLE_DEVICES=void``: CUDA images set it to ``all``, which would hand
    such a container every GPU if it ever ran under the nvidia runtime."""
    env = {"GPU_COUNT": str(count), "N_GPUS": str(count)}
    if vendor == VENDOR_NVIDIA and count == 0:
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
    return env
