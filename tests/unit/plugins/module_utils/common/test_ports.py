"""Unit tests of plugins/module_utils/common/ports.py: ports, port ranges, the default ranges."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.bai.cluster.plugins.module_utils.common import ports
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

REPO = Path(__file__).resolve().parents[5]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10205-10300", (10205, 10300)), (" 10205 - 10205 ", (10205, 10205)), ("80", (80, 80))],
)
def test_port_range_parses(text, expected):
    assert ports.parse_port_range(text) == expected


@pytest.mark.parametrize("text", ["", "10300-10205", "0-10", "10205-70000", "a-b", "1-2-3", None])
def test_bad_port_range_is_refused_with_the_expected_form(text):
    with pytest.raises(SpecError, match="port range"):
        ports.parse_port_range(text)


@pytest.mark.parametrize(
    ("value", "expected"), [(22, 22), ("2200", 2200), (" 80 ", 80), (65535, 65535)]
)
def test_ports_from_ints_and_digit_strings(value, expected):
    assert ports.parse_port(value, "port") == expected


@pytest.mark.parametrize("value", [0, 65536, True, "x", "", None, 22.0, "-1"])
def test_bad_ports_name_the_field(value):
    with pytest.raises(SpecError, match=r"^MASTER_PORT: got .*; expected a port number"):
        ports.parse_port(value, "MASTER_PORT")


def test_a_list_of_ports_and_ranges_is_sorted_and_merged():
    assert ports.parse_port_ranges([6001, "30000-31000", "6001", "7946:7946"]) == [
        (6001, 6001),
        (7946, 7946),
        (30000, 31000),
    ]
    assert [ports.range_text(r) for r in ports.parse_port_ranges("22")] == ["22"]
    with pytest.raises(SpecError, match="at least one"):
        ports.parse_port_ranges([])


def test_the_role_defaults_are_the_module_defaults():
    """roles/cluster_defaults declares the ranges for the roles (the firewall opens them);
    the modules' defaults are the same."""
    defaults = yaml.safe_load((REPO / "roles/cluster_defaults/defaults/main.yml").read_text())
    assert defaults["bai_container_port_range"] == ports.DEFAULT_CONTAINER_PORT_RANGE
    assert defaults["appproxy_port_range"] == ports.DEFAULT_APPPROXY_PORT_RANGE
