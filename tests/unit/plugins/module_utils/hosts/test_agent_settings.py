"""Unit tests of plugins/module_utils/hosts/agent_settings.py: an agent's session settings,
from its inventory variables to bai_session_containers' ``settings`` option."""

from __future__ import annotations

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_settings as st

SPEC = {"settings": {"type": "dict", "options": st.argument_spec(), "default": {}}}


def validated(settings: dict) -> tuple[dict, list[str]]:
    """What the module's argument spec makes of ``settings``: (values, errors)."""
    result = ArgumentSpecValidator(SPEC).validate({"settings": settings})
    return result.validated_parameters["settings"], result.error_messages


def test_an_agent_with_nothing_set_gets_every_default():
    got, errors = validated(st.from_hostvars({}, {"appproxy": ["proxy"]}))
    assert errors == []
    assert got["port_range"] == "30000-31000" and got["data_roots"] == ["/srv/bai-data"]
    assert (got["restart_policy"], got["gpu_method"], got["rdma"]) == (
        "unless-stopped",
        "device_request",
        True,
    )
    assert got["publish_address"] is None and got["publish_network"] is None


def test_each_inventory_variable_reaches_its_setting():
    host = {
        "bai_agent_id": "slot1",
        "bai_container_port_range": "32000-32100",
        "bai_zone_cidrs": {"compute": "10.210.3.0/24"},
        "bai_session_pids_limit": "512",
        "bai_session_rdma": "false",
        "bai_data_root": "/data",
        "unrelated": 1,
    }
    got, errors = validated(st.from_hostvars(host, {"appproxy": ["proxy"]}))
    assert errors == []
    assert (got["agent_id"], got["port_range"], got["publish_network"]) == (
        "slot1",
        "32000-32100",
        "10.210.3.0/24",
    )
    assert (got["pids_limit"], got["rdma"], got["data_roots"]) == (512, False, ["/data"])


def test_no_zone_and_no_app_proxy_publish_on_the_loopback_only():
    assert st.from_hostvars({}, {"appproxy": []})["publish_address"] == "127.0.0.1"
    assert "publish_address" not in st.from_hostvars({}, {"appproxy": ["p"]})
    zoned = st.from_hostvars({"bai_zone_cidrs": {"compute": "10.0.0.0/8"}}, {})
    assert "publish_address" not in zoned
    assert (
        st.from_hostvars({"bai_session_publish_address": "10.0.0.5"}, {})["publish_address"]
        == "10.0.0.5"
    )


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("restart_policy", "sometimes", "restart_policy"),
        ("pids_limit", "many", "pids_limit"),
        ("colour", "blue", "colour"),
    ],
)
def test_a_wrong_setting_is_refused_by_name(setting, value, says):
    _got, errors = validated({setting: value})
    assert errors and says in " ".join(errors), errors


def test_every_setting_is_one_inventory_variable_and_one_key():
    variables = [variable for variable, _key, _spec in st.SETTINGS]
    keys = [key for _variable, key, _spec in st.SETTINGS]
    assert len(set(variables)) == len(variables) and len(set(keys)) == len(keys)
    assert set(st.argument_spec()) == set(keys)
