"""Filters of the docker_swarm and image_distribution roles.

Thin wrappers around plugins/module_utils/bai_swarm.py.

The logic lives in module_utils (unit-tested, no Ansible imports); this file only finds
it (the configured module_utils paths first, then the repository layout) and turns its
ValueErrors into data the role can assert on with a message of its own.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

_NAME = "bai_swarm"


def _candidates() -> list[Path]:
    paths: list[Path] = []
    try:
        from ansible import constants

        paths += [Path(p) for p in constants.DEFAULT_MODULE_UTILS_PATH or []]
    except ImportError:  # outside Ansible (unit tests): the repository layout is enough
        pass
    paths.append(Path(__file__).resolve().parents[1] / "module_utils")
    return [p / f"{_NAME}.py" for p in paths]


def _load() -> ModuleType:
    for path in _candidates():
        if path.is_file():
            spec = importlib.util.spec_from_file_location(f"_bai_role_{_NAME}", path)
            if spec and spec.loader:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module
    raise ImportError(f"{_NAME}.py not found in {', '.join(map(str, _candidates()))}")


_utils = _load()


def address(addresses: Any, cidr: Any = None, default: Any = None) -> dict[str, Any]:
    """{address, error}: the node's address on the compute network, or why there is none."""
    try:
        return {"address": _utils.pick_address(addresses, cidr or None, default), "error": None}
    except ValueError as exc:
        return {"address": None, "error": str(exc)}


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "bai_swarm_address": address,
            "bai_image_registry_address": address,
            "bai_image_registry_is_insecure": _utils.registry_is_insecure,
            "bai_swarm_manager_membership": _utils.manager_membership,
            "bai_swarm_member_membership": _utils.member_membership,
            "bai_swarm_stale_nodes": _utils.stale_nodes,
            "bai_swarm_ready_nodes": _utils.ready_nodes,
            "bai_swarm_label_changes": _utils.label_changes,
            "bai_swarm_pool_differences": _utils.pool_differences,
            "bai_swarm_taken_ports": _utils.taken_ports,
        }
