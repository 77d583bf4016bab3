"""Filters of the agent playbooks (playbooks/agent_list.yml) and of the preflight checks
of the agents' declarations (roles/preflight)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.hosts.agent_view import (
    details,
    rows,
    table,
    totals,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.availability import (
    describe_json,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.topology import (
    check_tree,
)
from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable


def topology_error(
    levels: Sequence[str], agents: Sequence[str], hostvars: Mapping[str, Any]
) -> str:
    """What is wrong with the agents' topology (``bai_topology`` of each of ``agents``,
    under ``bai_topology_levels``), "" when nothing is (placement/topology.py: check_tree)."""
    try:
        check_tree(levels, {name: hostvars[name].get("bai_topology") for name in agents})
    except SpecError as exc:
        return str(exc)
    return ""


class FilterModule(FilterTable):
    """Ansible entry point."""

    FILTERS: ClassVar[Filters] = {
        "bai_agent_rows": rows,
        "bai_agent_table": table,
        "bai_agent_totals": totals,
        "bai_agent_details": details,
        "bai_availability_text": describe_json,
        "bai_topology_error": topology_error,
    }
