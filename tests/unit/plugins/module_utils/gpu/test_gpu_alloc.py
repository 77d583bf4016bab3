"""GPU allocation: device labels and which devices each container gets.

SIMULATED devices: no machine that runs these tests has a GPU; the agent's devices come
from a recorded nvidia-smi output (tests/unit/fixtures/gpu/) or are plain indices. What
is real: the label format and the allocator's guarantees (checked with hypothesis over
random device sets, holdings and requests).
"""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    GpuAllocationError,
    GpuError,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import (
    LABEL_GPU_DEVICES,
    allocate_devices,
    devices_in_use,
    format_device_label,
    parse_device_label,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import gpu_facts
from gpu_fakes import H100
from hypothesis import given, settings
from hypothesis import strategies as st


# --- labels --------------------------------------------------------------------------------
def test_device_labels_round_trip_and_tolerate_junk():
    assert format_device_label([3, 1, 1]) == "1,3"
    assert format_device_label([]) == ""
    assert parse_device_label("1,3") == [1, 3]
    assert parse_device_label(" 2 , x, -1,,7") == [2, 7]
    assert parse_device_label(None) == [] and parse_device_label("") == []
    running = [
        {LABEL_GPU_DEVICES: "0,1"},
        {LABEL_GPU_DEVICES: ""},
        {"other": "label"},
        {LABEL_GPU_DEVICES: "5"},
    ]
    assert devices_in_use(running) == {0, 1, 5}


# --- allocation ----------------------------------------------------------------------------
def test_allocation_example_two_sessions_on_one_eight_gpu_agent():
    first = allocate_devices(H100, set(), {"main1": 2, "sub1": 2})
    assert first == {"main1": [0, 1], "sub1": [2, 3]}
    held = (
        {LABEL_GPU_DEVICES: format_device_label(first["main1"])},
        {LABEL_GPU_DEVICES: format_device_label(first["sub1"])},
    )
    second = allocate_devices(H100, devices_in_use(held), {"main1": 4, "sub1": 0})
    assert second == {"main1": [4, 5, 6, 7], "sub1": []}


def test_allocation_prefers_an_adjacent_run_for_big_requests():
    # Free: 1, 3, 4, 5, 6 -> the 4-GPU container takes 3-6 although 1 is lower.
    got = allocate_devices(range(8), {0, 2, 7}, [("main1", 1), ("sub1", 4)])
    assert got == {"main1": [1], "sub1": [3, 4, 5, 6]}
    # No adjacent run left: the lowest free indices.
    assert allocate_devices(range(8), {1, 3, 5, 7}, {"main1": 2}) == {"main1": [0, 2]}


def test_allocation_accepts_fact_dicts_and_ignores_holdings_of_unknown_devices():
    facts = gpu_facts("nvidia", H100[:2])
    assert allocate_devices(facts["devices"], {9}, {"main1": 2}) == {"main1": [0, 1]}


def test_not_enough_free_devices_is_pending_with_the_numbers():
    with pytest.raises(GpuAllocationError) as err:
        allocate_devices(range(4), {0, 1}, {"main1": 2, "sub1": 1}, agent="agent1")
    text = str(err.value)
    assert text.startswith("PENDING: agent1 has 2 free GPU device(s) of 4")
    assert "free: 2,3; in use: 0,1" in text and "need 3 (main1: 2, sub1: 1)" in text
    assert err.value.reason == text[len("PENDING: ") :]
    with pytest.raises(GpuAllocationError, match="0 free GPU device"):
        allocate_devices([], set(), {"main1": 1})


@pytest.mark.parametrize(
    "requests", [{"main1": -1}, {"main1": True}, {"main1": 1.5}, [("a", 1), ("a", 1)]]
)
def test_bad_requests_are_refused(requests):
    with pytest.raises(GpuError):
        allocate_devices(range(4), set(), requests)


@settings(max_examples=300, deadline=None)
@given(
    devices=st.sets(st.integers(0, 15), max_size=16),
    in_use=st.sets(st.integers(0, 20), max_size=20),
    counts=st.lists(st.integers(0, 5), min_size=0, max_size=8),
)
def test_property_no_device_twice_and_only_free_devices(devices, in_use, counts):
    requests = {f"c{i}": n for i, n in enumerate(counts)}
    free = devices - in_use
    try:
        got = allocate_devices(devices, in_use, requests)
    except GpuAllocationError:
        assert sum(counts) > len(free)  # refused only when it truly does not fit
        return
    assert set(got) == set(requests)
    handed = [i for ids in got.values() for i in ids]
    assert len(handed) == len(set(handed)), "a device was given twice"
    assert set(handed) <= free, "a device in use or unknown was given"
    assert all(len(got[name]) == n for name, n in requests.items())
    assert got == allocate_devices(devices, in_use, requests)  # deterministic


@settings(max_examples=100, deadline=None)
@given(rounds=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=4), max_size=6))
def test_property_sessions_created_one_after_another_never_share(rounds):
    """Labels written after each allocation are what the next allocation reads."""
    running: list[dict[str, str]] = []
    for n, counts in enumerate(rounds):
        requests = {f"s{n}-c{i}": k for i, k in enumerate(counts)}
        try:
            got = allocate_devices(range(8), devices_in_use(running), requests)
        except GpuAllocationError:
            continue
        running += [{LABEL_GPU_DEVICES: format_device_label(ids)} for ids in got.values()]
    held = [i for labels in running for i in parse_device_label(labels[LABEL_GPU_DEVICES])]
    assert len(held) == len(set(held)) and set(held) <= set(range(8))
