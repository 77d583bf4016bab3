"""Filters of the metrics playbook (playbooks/metrics.yml) and of roles/monitoring."""

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
    proxies: Mapping[str, Any] | None = None,
) -> str:
    """The cluster's metrics in ``flavour`` (openmetrics or prometheus): the ledger read,
    the agent rows (bai_agent_rows), the agents' bai_agent_info results, the time (the
    ledger's; this host's when the ledger was not read), and the app proxies'
    bai_appproxy_apps reads ({host: read, or None when it failed})."""
    # Imported when used: every playbook that names a bai filter loads this file.
    from ansible_collections.bai.cluster.plugins.module_utils.metrics import apps
    from ansible_collections.bai.cluster.plugins.module_utils.metrics.cluster import collect
    from ansible_collections.bai.cluster.plugins.module_utils.metrics.exposition import render

    when = time.time() if now is None else float(now)
    return render([*collect(ledger, rows, reads, when), *apps.families(proxies or {})], flavour)


def prometheus_config(
    addresses: Mapping[str, Sequence[str]],
    hosts: Sequence[str],
    scraper: str,
    zone_cidrs: Any = None,
    port: int = 9100,
    groups: Mapping[str, Sequence[str]] | None = None,
    group_order: Sequence[str] = (),
    extra_targets: Sequence[str] = (),
    interval: str = "15s",
    rule_files: Sequence[str] = (),
    self_target: str = "localhost:9090",
) -> dict[str, Any]:
    """{"config": prometheus.yml as a mapping, "problems": [...]} for the monitoring host
    ``scraper``: every host of ``hosts`` scraped at ``port`` (module_utils/metrics/scrape.py
    says at which of its ``addresses``, {host: [address]} as bai_firewall_addresses
    gives them), plus ``extra_targets``, the rule files and Prometheus itself."""
    from ansible_collections.bai.cluster.plugins.module_utils.metrics import scrape

    nodes = scrape.node_targets(addresses, hosts, scraper, zone_cidrs, port, groups, group_order)
    config = scrape.prometheus_config(
        nodes["static_configs"], extra_targets, interval, rule_files, self_target
    )
    return {"config": config, "problems": nodes["problems"]}


class FilterModule(FilterTable):
    """Ansible entry point."""

    FILTERS: ClassVar[Filters] = {
        "bai_metrics_text": metrics_text,
        "bai_prometheus_config": prometheus_config,
    }
