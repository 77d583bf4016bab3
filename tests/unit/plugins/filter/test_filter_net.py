"""plugins/filter/bai_net.py: the network checks preflight and docker_engine assert on."""

import pytest
from ansible_collections.bai.cluster.plugins.filter import bai_net

LAB_ZONES = {"public": "10.210.1.0/24", "management": "10.210.2.0/24", "compute": "10.210.3.0/24"}


def test_lab_zones_are_valid_and_disjoint():
    assert bai_net.cidr_errors(LAB_ZONES) == []
    assert bai_net.cidr_overlaps(LAB_ZONES) == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("10.210.3.0", "not in CIDR notation"),
        ("10.210.3.5/24", "has host bits set; the network is 10.210.3.0/24"),
        ("10.210.300.0/24", "not a valid CIDR"),
        ("10.210.3.0/33", "not a valid CIDR"),
        (24, "not in CIDR notation"),
        (None, "not in CIDR notation"),
    ],
)
def test_invalid_cidrs_are_named_with_the_reason(value, reason):
    (problem,) = bai_net.cidr_errors({"compute": value})
    assert problem.startswith(f"compute: {value!r} ")
    assert reason in problem


def test_lists_are_named_by_position():
    assert bai_net.cidr_errors(["10.0.0.0/8", "nonsense"]) == [
        "[1]: 'nonsense' not in CIDR notation (address/prefix, e.g. 10.210.3.0/24)"
    ]


def test_wrong_container_type_is_a_problem_not_a_crash():
    assert bai_net.cidr_errors("10.0.0.0/8") == ["expected a mapping or a list of CIDRs, got str"]
    assert bai_net.cidr_overlaps(None) == ["expected a mapping or a list of CIDRs, got NoneType"]


def test_overlaps_report_each_pair_once():
    zones = {"public": "10.210.0.0/16", "management": "10.210.2.0/24", "compute": "10.210.3.0/24"}
    assert bai_net.cidr_overlaps(zones) == [
        "public (10.210.0.0/16) overlaps management (10.210.2.0/24)",
        "public (10.210.0.0/16) overlaps compute (10.210.3.0/24)",
    ]


def test_overlaps_ignore_invalid_entries_and_other_ip_versions():
    assert bai_net.cidr_overlaps({"a": "bad", "b": "10.0.0.0/8", "c": "fd00::/8"}) == []


def test_identical_cidrs_overlap():
    assert bai_net.cidr_overlaps({"a": "10.1.0.0/16", "b": "10.1.0.0/16"}) == [
        "a (10.1.0.0/16) overlaps b (10.1.0.0/16)"
    ]


def test_overlaps_with_another_set():
    pools = ["10.200.0.0/14"]
    assert bai_net.cidr_overlaps_with(pools, [*LAB_ZONES.values(), "10.224.0.0/12"]) == []
    assert bai_net.cidr_overlaps_with(pools, {"compute": "10.201.3.0/24"}) == [
        "[0] (10.200.0.0/14) overlaps compute (10.201.3.0/24)"
    ]


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",  # RFC 1918
        "172.17.0.1",
        "192.168.1.1",
        "127.0.0.1",  # loopback
        "169.254.1.1",  # link-local
        "100.64.0.1",  # CGNAT
        "192.0.2.10",  # documentation
        "0.0.0.0",
        "255.255.255.255",
    ],
)
def test_non_public_addresses(address):
    assert bai_net.public_ipv4([address]) == []


def test_public_addresses_are_returned_and_ipv6_and_garbage_ignored():
    addresses = [
        "10.0.0.1",
        "8.8.8.8",
        "100.63.255.1",
        "2001:db8::1",
        "2a00:1450::1",
        "junk",
        "1.2.3.4/24",
    ]
    assert bai_net.public_ipv4(addresses) == ["8.8.8.8", "100.63.255.1", "1.2.3.4"]
    assert bai_net.public_ipv4("8.8.4.4") == ["8.8.4.4"]
    assert bai_net.public_ipv4(None) == []


def test_filter_module_exports_every_filter():
    assert set(bai_net.FilterModule().filters()) == {
        "bai_cidr_errors",
        "bai_cidr_overlaps",
        "bai_cidr_overlaps_with",
        "bai_public_ipv4",
        "bai_address_pool_errors",
        "bai_cidr_host",
        "bai_zone_ipv4",
    }


def test_default_address_pool_is_fine():
    assert bai_net.address_pool_errors([{"base": "10.200.0.0/14", "size": 24}]) == []


@pytest.mark.parametrize(
    ("pool", "problem"),
    [
        (
            {"base": "10.200.0.0/14", "size": 12},
            "[0]: size 12 must lie between the base's prefix length 14 and 30",
        ),
        (
            {"base": "10.200.0.0/14", "size": 31},
            "[0]: size 31 must lie between the base's prefix length 14 and 30",
        ),
        ({"base": "10.200.0.0/14", "size": "24"}, "[0]: size '24' is not an integer prefix length"),
        ({"base": "10.200.0.0/14", "size": True}, "[0]: size True is not an integer prefix length"),
        (
            {"base": "10.200.1.0/14", "size": 24},
            "[0]: base '10.200.1.0/14' has host bits set; the network is 10.200.0.0/14",
        ),
        (
            {"base": "10.200.0.0/14"},
            "[0]: {'base': '10.200.0.0/14'} must be a mapping with exactly base and size",
        ),
        ("10.200.0.0/14", "[0]: '10.200.0.0/14' must be a mapping with exactly base and size"),
    ],
)
def test_bad_address_pools(pool, problem):
    assert bai_net.address_pool_errors([pool]) == [problem]


def test_address_pools_must_be_a_list():
    assert bai_net.address_pool_errors({"base": "10.0.0.0/8", "size": 24}) == [
        "expected a list of pools, got dict"
    ]


def test_cidr_host_gives_the_numbered_address():
    assert bai_net.cidr_host("10.210.3.0/24", 11) == "10.210.3.11"
    assert bai_net.cidr_host("10.0.0.0/30", 2) == "10.0.0.2"


@pytest.mark.parametrize("number", [0, 255, 300, -1])
def test_cidr_host_refuses_network_broadcast_and_outside(number):
    with pytest.raises(ValueError, match="outside"):
        bai_net.cidr_host("10.210.3.0/24", number)


IP_LINES = [
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever",
    "2: eth0    inet 10.210.1.12/24 brd 10.210.1.255 scope global eth0\\       valid_lft forever",
    "3: eth1    inet 10.210.3.12/24 brd 10.210.3.255 scope global eth1\\       valid_lft forever",
    "4: eth2    inet 169.254.9.9/16 scope link eth2\\       valid_lft forever",
]


def test_zone_ipv4_keeps_the_addresses_inside_the_zone():
    assert bai_net.zone_ipv4(IP_LINES, LAB_ZONES["public"]) == ["10.210.1.12"]
    assert bai_net.zone_ipv4(IP_LINES, [LAB_ZONES["public"], LAB_ZONES["compute"]]) == [
        "10.210.1.12",
        "10.210.3.12",
    ]
    assert bai_net.zone_ipv4(IP_LINES, LAB_ZONES["management"]) == []


def test_zone_ipv4_without_zones_leaves_out_loopback_and_link_local():
    assert bai_net.zone_ipv4(IP_LINES) == ["10.210.1.12", "10.210.3.12"]
    assert bai_net.zone_ipv4(["10.0.0.1", "10.0.0.1/8", "fd00::1", "nonsense"], None) == [
        "10.0.0.1"
    ]
    assert bai_net.zone_ipv4("10.0.0.1\n10.0.0.2") == ["10.0.0.1", "10.0.0.2"]


def test_zone_ipv4_refuses_a_zone_that_is_no_cidr():
    with pytest.raises(ValueError, match="not a CIDR"):
        bai_net.zone_ipv4(IP_LINES, "public")
