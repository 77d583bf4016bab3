"""Scalar parsing: memory sizes, CPU/GPU counts, resource dicts, display helpers."""

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import parse_mem
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    Resources,
    format_cpu,
    format_mem,
    nano_cpus,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.resources import (
    MIN_MEM,
    parse_resources,
)

KI, MI, GI = 1024, 1024**2, 1024**3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1),
        (4096, 4096),
        (2.0 * GI, 2 * GI),
        ("100", 100),
        ("100b", 100),
        ("2048k", 2048 * KI),
        ("512m", 512 * MI),
        ("512M", 512 * MI),
        ("512Mi", 512 * MI),
        ("512mb", 512 * MI),
        ("1g", GI),
        ("1G", GI),
        ("1Gi", GI),
        ("1GiB", GI),
        ("1.5G", GI + GI // 2),
        ("0.5k", 512),
        ("2t", 2 * 1024**4),
        (" 1g ", GI),
        ("1 g", GI),
    ],
)
def test_parse_mem_accepts_docker_sizes(value, expected):
    assert parse_mem(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        "0",
        "0g",
        "0.0001k",
        "",
        "g",
        "1x",
        "1.g",
        "-1g",
        "1e9",
        "1 gig",
        "1ib",
        True,
        False,
        None,
        1.5,
        [1],
        {"g": 1},
    ],
)
def test_parse_mem_rejects(value):
    with pytest.raises(SpecError, match="mem"):
        parse_mem(value)


def test_parse_mem_error_says_what_is_allowed():
    with pytest.raises(SpecError) as err:
        parse_mem("lots", "resources.mem")
    text = str(err.value)
    assert text.startswith("resources.mem:")
    assert "'lots'" in text
    assert "512m" in text


def test_parse_resources_defaults():
    assert parse_resources(None) == Resources(1.0, GI, 0)
    assert parse_resources({}) == Resources(1.0, GI, 0)


def test_parse_resources_full_and_string_numbers():
    got = parse_resources({"cpu": "2.5", "mem": "512m", "gpu": "2"})
    assert got == Resources(2.5, 512 * MI, 2)


def test_parse_resources_missing_keys_come_from_default():
    base = Resources(4.0, 8 * GI, 1)
    assert parse_resources({"cpu": 0.5}, base) == Resources(0.5, 8 * GI, 1)
    assert parse_resources({"gpu": None}, base) == base


def test_parse_resources_keeps_three_decimals():
    assert parse_resources({"cpu": 0.1234}).cpu == 0.123


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"cpu": 0}, "resources.cpu"),
        ({"cpu": -1}, "resources.cpu"),
        ({"cpu": 0.0001}, "resources.cpu"),
        ({"cpu": "many"}, "resources.cpu"),
        ({"cpu": True}, "resources.cpu"),
        ({"cpu": float("nan")}, "resources.cpu"),
        ({"cpu": float("inf")}, "resources.cpu"),
        ({"gpu": -1}, "resources.gpu"),
        ({"gpu": 0.5}, "resources.gpu"),
        ({"gpu": True}, "resources.gpu"),
        ({"mem": "1m"}, "resources.mem"),
        ({"mem": "abc"}, "resources.mem"),
        ({"cpus": 1}, "resources"),
        ("1 cpu", "resources"),
    ],
)
def test_parse_resources_rejects(raw, field):
    with pytest.raises(SpecError) as err:
        parse_resources(raw)
    assert str(err.value).startswith(f"{field}:")


def test_parse_resources_minimum_memory_is_dockers():
    assert parse_resources({"mem": MIN_MEM}).mem == MIN_MEM
    with pytest.raises(SpecError, match="at least 6m"):
        parse_resources({"mem": MIN_MEM - 1})


def test_unknown_resource_key_lists_allowed_ones():
    with pytest.raises(SpecError, match="cpus.*allowed: cpu, mem, gpu"):
        parse_resources({"cpus": 1})


@pytest.mark.parametrize(
    ("cpu", "text"),
    [(1.0, "1"), (1.5, "1.5"), (0.125, "0.125"), (10.0, "10"), (0, "0")],
)
def test_format_cpu(cpu, text):
    assert format_cpu(cpu) == text


@pytest.mark.parametrize(
    ("mem", "text"),
    [
        (100, "100b"),
        (2048, "2k"),
        (512 * MI, "512m"),
        (GI + GI // 2, "1.5g"),
        (-GI, "-1g"),
    ],
)
def test_format_mem(mem, text):
    assert format_mem(mem) == text


def test_format_mem_round_trips_through_parse_mem():
    for mem in (2048, 512 * MI, 3 * GI, GI + GI // 2):
        assert parse_mem(format_mem(mem)) == mem


def test_nano_cpus():
    assert nano_cpus(Resources(1.5, GI, 0)) == 1_500_000_000
    assert nano_cpus(Resources(0.001, GI, 0)) == 1_000_000
