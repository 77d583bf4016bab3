"""Filters of the metrics playbook (playbooks/metrics.yml)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable


def metrics_text(
    ledger: Mapping[str, Any] | None,
    rows: Sequence[Mapping[str, Any]],
    reads: Sequence[Mapping[str, Any]],
    now: float | None = None,
    flavour: str = "openmetrics",
) -> str:
    """The cluster's metrics in ``flavour`` (openmetrics or prometheus): the ledger read,
    the agent rows (bai_agent_rows), the agents' bai_agent_info results, and the time
    (the ledger's; this host's when the ledger was not read)."""
    # Imported when used: every playbook that names a bai filter loads this file.
    from ansible_collections.bai.cluster.plugins.module_utils.metrics.cluster import collect
    from ansible_collections.bai.cluster.plugins.module_utils.metrics.exposition import render

    when = time.time() if now is None else float(now)
    return render(collect(ledger, rows, reads, when), flavour)


class FilterModule(FilterTable):
    """Ansible entry point."""

    FILTERS: ClassVar[Filters] = {"bai_metrics_text": metrics_text}
