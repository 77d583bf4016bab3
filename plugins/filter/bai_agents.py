"""Filters of the agent playbooks (playbooks/agent_list.yml)."""

from __future__ import annotations

from typing import ClassVar

from ansible_collections.bai.cluster.plugins.module_utils.hosts.agent_view import (
    details,
    rows,
    table,
    totals,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.availability import (
    describe_json,
)
from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable


class FilterModule(FilterTable):
    """Ansible entry point."""

    FILTERS: ClassVar[Filters] = {
        "bai_agent_rows": rows,
        "bai_agent_table": table,
        "bai_agent_totals": totals,
        "bai_agent_details": details,
        "bai_availability_text": describe_json,
    }
