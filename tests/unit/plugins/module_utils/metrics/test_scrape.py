"""Prometheus's configuration for the cluster (module_utils/metrics/scrape.py, the filter
bai_prometheus_config): each exporter scraped at an address of a zone the monitoring host
shares with it. promtool checks a rendered configuration in make lint
(scripts/check_monitoring.sh)."""

from __future__ import annotations

import ipaddress

from ansible_collections.bai.cluster.plugins.filter.bai_metrics import prometheus_config
from ansible_collections.bai.cluster.plugins.module_utils.metrics import scrape
from hypothesis import given
from hypothesis import strategies as st

ZONES = {"public": "10.210.1.0/24", "management": "10.210.2.0/24", "compute": "10.210.3.0/24"}
# The lab: {host: its zone addresses}, as bai_firewall_addresses gives them.
LAB = {
    "webserver": ["10.210.1.10", "10.210.2.10"],
    "manager": ["10.210.2.11", "10.210.3.11"],
    "appproxy": ["10.210.1.12", "10.210.3.12"],
    "agent1": ["10.210.3.21"],
}
GROUPS = {
    "webserver": ["webserver"],
    "manager": ["manager"],
    "appproxy": ["appproxy"],
    "agents": ["agent1"],
    "monitoring": ["manager"],
}
ORDER = ["webserver", "manager", "appproxy", "agents", "monitoring"]


def test_each_host_is_scraped_in_a_zone_the_monitoring_host_shares():
    got = scrape.node_targets(LAB, list(LAB), "manager", ZONES, 9100, GROUPS, ORDER)
    assert got["problems"] == []
    assert [(c["labels"]["instance"], c["targets"]) for c in got["static_configs"]] == [
        ("webserver", ["10.210.2.10:9100"]),  # management, not public
        ("manager", ["10.210.2.11:9100"]),
        ("appproxy", ["10.210.3.12:9100"]),  # compute, not public
        ("agent1", ["10.210.3.21:9100"]),
    ]
    # The first group of the order names it (manager is in monitoring too).
    assert [c["labels"]["bai_group"] for c in got["static_configs"]] == [
        "webserver",
        "manager",
        "appproxy",
        "agents",
    ]


def test_a_host_sharing_no_zone_is_scraped_at_its_first_address_and_one_without_is_a_problem():
    addresses = {"mon": ["10.210.2.50"], "far": ["192.0.2.7", "10.210.3.9"], "ghost": []}
    got = scrape.node_targets(addresses, ["far", "ghost"], "mon", ZONES)
    assert got["static_configs"] == [{"targets": ["192.0.2.7:9100"], "labels": {"instance": "far"}}]
    assert got["problems"] == ["ghost: no address known to scrape it at"]


def test_ipv6_targets_are_bracketed_and_zones_may_be_lists():
    zones = {"compute": ["10.210.3.0/24", "fd00:3::/64"]}
    addresses = {"mon": ["fd00:3::1"], "a": ["192.0.2.1", "fd00:3::21"]}
    got = scrape.node_targets(addresses, ["a"], "mon", zones, 9100)
    assert got["static_configs"][0]["targets"] == ["[fd00:3::21]:9100"]


def test_the_configuration_has_both_jobs_the_rules_and_the_extra_targets():
    made = prometheus_config(
        LAB,
        ["agent1"],
        "manager",
        zone_cidrs=ZONES,
        groups=GROUPS,
        group_order=ORDER,
        extra_targets=["controller.example.org:9100"],
        interval="30s",
        rule_files=["/etc/prometheus/rules/bai_cluster.rules.yml"],
        self_target="localhost:9090",
    )
    config = made["config"]
    assert made["problems"] == []
    assert config["global"] == {"scrape_interval": "30s", "evaluation_interval": "30s"}
    assert config["rule_files"] == ["/etc/prometheus/rules/bai_cluster.rules.yml"]
    jobs = {job["job_name"]: job["static_configs"] for job in config["scrape_configs"]}
    assert jobs["prometheus"] == [{"targets": ["localhost:9090"]}]
    assert jobs["node"] == [
        {"targets": ["10.210.3.21:9100"], "labels": {"instance": "agent1", "bai_group": "agents"}},
        {"targets": ["controller.example.org:9100"], "labels": {"bai_group": "extra"}},
    ]


octet = st.integers(min_value=1, max_value=254)
zone_index = st.integers(min_value=1, max_value=3)


@given(
    st.lists(st.tuples(zone_index, octet), min_size=1, max_size=4),
    st.lists(st.tuples(zone_index, octet), min_size=1, max_size=3),
)
def test_the_chosen_address_is_the_hosts_own_and_shares_a_zone_whenever_one_can(host, mon):
    own = [f"10.210.{z}.{o}" for z, o in host]
    scraper = [f"10.210.{z}.{o}" for z, o in mon]
    chosen = scrape.scrape_address(own, scraper, ZONES)
    assert chosen in own
    shared = {z for z, _o in host} & {z for z, _o in mon}
    if shared:
        assert ipaddress.ip_address(chosen).packed[2] in shared
    else:
        assert chosen == own[0]
