"""Filters of the docker_swarm and image_distribution roles.

Thin wrappers around plugins/module_utils/hosts/swarm.py (unit-tested, no Ansible imports):
they turn its ValueErrors into data the role can assert on with a message of its own.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ansible_collections.bai.cluster.plugins.module_utils.hosts import swarm as _utils
from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable


def address(addresses: Any, cidr: Any = None, default: Any = None) -> dict[str, Any]:
    """{address, error}: the node's address on the compute network, or why there is none."""
    try:
        found = _utils.advertise_address(addresses, cidr or None, default)
    except ValueError as exc:
        return {"address": None, "error": str(exc)}
    return {"address": found, "error": None}


class FilterModule(FilterTable):
    """Ansible entry point."""

    FILTERS: ClassVar[Filters] = {
        "bai_swarm_address": address,
        "bai_image_registry_address": address,
        "bai_image_registry_is_insecure": _utils.registry_is_insecure,
        "bai_swarm_manager_membership": _utils.manager_membership,
        "bai_swarm_member_membership": _utils.member_membership,
        "bai_swarm_manager_removal": _utils.manager_removal,
        "bai_swarm_stale_nodes": _utils.stale_nodes,
        "bai_swarm_ready_nodes": _utils.ready_nodes,
        "bai_swarm_label_changes": _utils.label_changes,
        "bai_swarm_topology_labels": _utils.topology_labels,
        "bai_swarm_pool_differences": _utils.pool_differences,
        "bai_swarm_taken_ports": _utils.taken_ports,
    }
