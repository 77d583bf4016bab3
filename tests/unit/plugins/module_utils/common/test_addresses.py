"""Unit tests of plugins/module_utils/common/addresses.py: reading a host's addresses and the
zones they lie in."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common import addresses as ad

IP_ADDR = [
    "1: lo    inet 127.0.0.1/8 scope host lo",
    "2: docker0    inet 10.200.0.1/24 brd 10.200.0.255 scope global docker0",
    "40: eth0    inet 10.210.3.21/24 brd 10.210.3.255 scope global eth0",
]


def test_the_address_inside_the_zone_is_picked():
    assert ad.first_in_zone(ad.read_addresses(IP_ADDR), "10.210.3.0/24") == "10.210.3.21"
    assert ad.first_in_zone(["10.200.0.1", "10.210.1.12"], "10.210.1.0/24") == "10.210.1.12"
    assert ad.first_in_zone(["10.210.1.12/24"], "10.210.1.0/24") == "10.210.1.12"


def test_no_address_in_the_zone_or_no_zone_gives_none():
    assert ad.first_in_zone(ad.read_addresses(IP_ADDR), "192.0.2.0/24") is None
    assert ad.first_in_zone(ad.read_addresses(IP_ADDR), None) is None


def test_ip_addr_show_lines_give_their_addresses_in_order():
    text = "\n".join([*IP_ADDR, "41: eth1    inet6 fd00::5/64 scope global"])
    found = ["127.0.0.1", "10.200.0.1", "10.210.3.21", "fd00::5"]
    assert ad.read_addresses(text) == found == ad.read_addresses(text.splitlines())
    assert ad.read_addresses(["10.0.0.1/8", " fd00::1 "]) == ["10.0.0.1/8", "fd00::1"]
    assert ad.first_in_zone(ad.read_addresses(IP_ADDR), "10.210.3.0/24") == "10.210.3.21"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.1.2.3", "10.1.2.3"),
        (" 10.1.2.3/24 ", "10.1.2.3"),
        ("fe80::1%eth0", "fe80::1"),
        ("agent1", None),
        ("", None),
        (None, None),
    ],
)
def test_an_address_is_read_without_prefix_or_zone(text, expected):
    found = ad.parse_ip(text)
    assert (str(found) if found else None) == expected


def test_in_zone_keeps_the_order_given_and_the_version_asked():
    found = ["10.0.0.9", "fd00::1", "not-an-ip", "10.0.0.2/8", "10.0.0.9"]
    assert ad.in_zone(found, ["10.0.0.0/8", "fd00::/8"]) == ["10.0.0.9", "fd00::1", "10.0.0.2"]
    assert ad.in_zone(found, "::/0") == ["fd00::1"]
    assert ad.in_zone(found, ["0.0.0.0/0", "::/0"], version=4) == ["10.0.0.9", "10.0.0.2"]
    with pytest.raises(ValueError, match="not a CIDR"):
        ad.in_zone(found, ["10.0.0.0/33"])


@pytest.mark.parametrize(
    ("cidrs", "address", "expected"),
    [
        (["10.210.2.0/24"], "10.210.2.5", True),
        ("10.210.2.0/24", "10.210.3.5", False),
        (["bad", "::/0"], "fd00::1", True),
        ([], "10.0.0.1", False),
        (None, "10.0.0.1", False),
        (["10.0.0.0/8"], "not-an-ip", False),
    ],
)
def test_covers(cidrs, address, expected):
    assert ad.covers(cidrs, address) is expected


def test_own_ipv4_lines_are_ip_s_answer_or_none():
    line = "2: eth0    inet 10.210.1.12/24 brd 10.210.1.255 scope global eth0"
    assert ad.own_ipv4_lines(lambda argv: (0, line + "\n", "")) == [line]
    assert ad.own_ipv4_lines(lambda argv: (1, "", "Cannot open netlink")) is None

    def missing(argv):
        raise OSError("no such file: ip")

    assert ad.own_ipv4_lines(missing) is None
