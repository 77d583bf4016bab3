"""Filter over bai_clock's answer (plugins/module_utils/hosts/clock.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.hosts.clock import assess


class FilterModule:
    """Ansible entry point.

    clock | bai_clock_assess(offset, max_offset)   {problem, warning, how} for a host
    """

    def filters(self) -> dict[str, Any]:
        return {"bai_clock_assess": assess}
