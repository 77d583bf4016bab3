"""dcgm-exporter's job mapping on a GPU agent (docs/metrics.md, "GPU metrics by session").

NVIDIA's dcgm-exporter labels each GPU's metrics with the job that holds it when it is
given a folder of files named by GPU index, each holding that GPU's job ids, one a line
(``DCGM_HPC_JOB_MAPPING_DIR``; it works without Kubernetes). Here the job is the session:
the file ``FOLDER/2`` holds the session id of the container GPU 2 is given to.

The folder is made from the engine's truth, never patched by events: after each create and
each removal on the agent, bai_session_containers lists the session containers of the
engine that hold GPU devices and are not stopped (their ``ai.backend.cluster.gpu-devices``
labels), and writes every file that changed (a temporary file renamed over it) and removes
the files of GPUs no session holds. Virtual agents of one engine share it, as they share
the GPUs. An agent whose sessions never had a GPU gets no folder.

    mapping(containers) -> {index: [session ids]}    from the engine's container list
    sync(folder, wanted) -> changed                  the folder made to say ``wanted``
    kept_after(done, host, api, folder, locks, gpus) a module's result, with it kept
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_GPU_DEVICES,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.locks import locked
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import parse_device_label

DEFAULT_DIR = "/var/lib/bai-cluster/dcgm-job-mapping"
# Container states that hold a GPU (a stopped member of a batch session being removed does
# not: its job is over).
_HOLDING = ("created", "running", "restarting", "paused")


def mapping(containers: Iterable[Mapping[str, Any]]) -> dict[int, list[str]]:
    """GPU index -> the session ids holding it, from the engine's container list (the
    API's: ``Labels``, ``State``)."""
    held: dict[int, set[str]] = {}
    for container in containers:
        labels = container.get("Labels") or {}
        sid = labels.get(LABEL_SESSION_ID)
        if not sid or container.get("State") not in _HOLDING:
            continue
        for index in parse_device_label(labels.get(LABEL_GPU_DEVICES)):
            held.setdefault(index, set()).add(str(sid))
    return {index: sorted(sids) for index, sids in sorted(held.items())}


def sync(folder: str, wanted: Mapping[int, Iterable[str]]) -> bool:
    """Make ``folder`` say ``wanted``: one file per GPU index a session holds, none for
    the others (only files named by a number are ever removed). True if it changed."""
    if not wanted and not os.path.isdir(folder):
        return False
    os.makedirs(folder, mode=0o755, exist_ok=True)
    texts = {str(index): "".join(f"{sid}\n" for sid in sids) for index, sids in wanted.items()}
    changed = False
    for name in os.listdir(folder):
        if name.isdigit() and name not in texts:
            os.unlink(os.path.join(folder, name))
            changed = True
    for name, text in texts.items():
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as handle:
                if handle.read() == text:
                    continue
        except FileNotFoundError:
            pass
        fd, tmp = tempfile.mkstemp(prefix=".job.", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        changed = True
    return changed


def keep(api: Any, folder: str, lock_dir: str, lock_timeout: float) -> bool:
    """The engine's GPU sessions listed and ``folder`` made to say so, under a lock of
    the engine's (two creates on one engine never write an older view last)."""
    if not folder:
        return False
    with locked(os.path.join(lock_dir, "gpu-job-mapping.lock"), lock_timeout):
        listed = api.containers(all=True, filters={"label": [LABEL_GPU_DEVICES]})
        return sync(folder, mapping(listed))


def kept_after(
    done: dict[str, Any],
    host: Any,
    api: Any,
    folder: str,
    locks: tuple[str, float],
    gpus: bool,
) -> dict[str, Any]:
    """A create's or a removal's result ``done`` with the mapping kept after it
    (``gpu_job_mapping``: whether it changed) when this run made GPU containers
    (``gpus``) or the folder exists; unchanged in check mode. It only serves metrics: a
    failure to write it is a warning on ``host``, never the run's failure."""
    if host.check_mode or not folder or not (gpus or os.path.isdir(folder)):
        return done
    try:
        changed = keep(api, folder, *locks)
    except OSError as exc:
        host.warn(f"dcgm-exporter's job mapping in {folder} not kept: {exc}")
        return done
    return {**done, "gpu_job_mapping": changed}
