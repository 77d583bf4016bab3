"""Filter over bai_clock's answer (plugins/module_utils/hosts/clock.py)."""

from __future__ import annotations

from typing import ClassVar

from ansible_collections.bai.cluster.plugins.module_utils.hosts.clock import assess
from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable


class FilterModule(FilterTable):
    """Ansible entry point.

    clock | bai_clock_assess(offset, max_offset)   {problem, warning, how} for a host
    """

    FILTERS: ClassVar[Filters] = {"bai_clock_assess": assess}
