"""Prometheus's configuration for the cluster (roles/monitoring): which node exporters it
scrapes, at which address, and the toolkit's alert rules. Pure.

A node is scraped at the first of its addresses that lies in a zone where the monitoring
host has an address too: the monitoring host reaches it there directly, through no other
zone (an agent, on the compute zone only, at its compute address; the webserver at its
management address). A node that shares no zone with it is scraped at its first address.

    scrape_address(addresses, scraper_addresses, zone_cidrs)   that address, or None
    node_targets(addresses, hosts, scraper, ...)               static_configs of the nodes
    prometheus_config(targets, ...)                            prometheus.yml as a mapping
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import (
    networks,
    parse_ip,
)

NODE_JOB = "node"
PROMETHEUS_JOB = "prometheus"


def scrape_address(
    addresses: Sequence[str], scraper_addresses: Sequence[str], zone_cidrs: Any
) -> Optional[str]:
    """The address of ``addresses`` the scraper reaches in a zone of its own, else the
    first address; None when there is none."""
    own = [parse_ip(a) for a in addresses]
    mine = [a for a in own if a is not None]
    if not mine:
        return None
    scraper = [a for a in (parse_ip(s) for s in scraper_addresses) if a is not None]
    values = zone_cidrs.values() if isinstance(zone_cidrs, Mapping) else (zone_cidrs or [])
    zones = networks([c for v in values for c in ([v] if isinstance(v, str) else list(v))])
    shared = [net for net in zones if any(s.version == net.version and s in net for s in scraper)]
    for address in mine:
        if any(address.version == net.version and address in net for net in shared):
            return str(address)
    return str(mine[0])


def _target(address: str, port: int) -> str:
    bracketed = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"{bracketed}:{int(port)}"


def node_targets(
    addresses: Mapping[str, Sequence[str]],
    hosts: Sequence[str],
    scraper: str,
    zone_cidrs: Any = None,
    port: int = 9100,
    groups: Optional[Mapping[str, Sequence[str]]] = None,
    group_order: Sequence[str] = (),
) -> dict[str, Any]:
    """{"static_configs": [...], "problems": [...]}: one static config per host of
    ``hosts``, in their order, labelled ``instance`` (the inventory name) and
    ``bai_group`` (its first group of ``group_order``); a problem for each host whose
    address is not known."""
    scraper_addresses = list(addresses.get(scraper, ()))
    configs: list[dict[str, Any]] = []
    problems: list[str] = []
    for host in hosts:
        address = scrape_address(list(addresses.get(host, ())), scraper_addresses, zone_cidrs)
        if address is None:
            problems.append(f"{host}: no address known to scrape it at")
            continue
        labels = {"instance": str(host)}
        group = next((g for g in group_order if host in (groups or {}).get(g, ())), None)
        if group:
            labels["bai_group"] = str(group)
        configs.append({"targets": [_target(address, port)], "labels": labels})
    return {"static_configs": configs, "problems": problems}


def prometheus_config(
    static_configs: Sequence[Mapping[str, Any]],
    extra_targets: Sequence[str] = (),
    interval: str = "15s",
    rule_files: Sequence[str] = (),
    self_target: str = "localhost:9090",
) -> dict[str, Any]:
    """prometheus.yml: the node exporters (and ``extra_targets``, "host:port" each, e.g.
    the controller where the housekeeping pass writes its textfile) in job ``node``,
    Prometheus itself in job ``prometheus``, the rule files, one interval for scraping
    and for evaluating the rules."""
    node = [dict(c) for c in static_configs]
    node += [{"targets": [str(t)], "labels": {"bai_group": "extra"}} for t in extra_targets]
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": list(rule_files),
        "scrape_configs": [
            {"job_name": PROMETHEUS_JOB, "static_configs": [{"targets": [self_target]}]},
            {"job_name": NODE_JOB, "static_configs": node},
        ],
    }
