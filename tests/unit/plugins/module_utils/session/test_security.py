"""plugins/module_utils/session/security.py: how session containers are confined."""

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.security import (
    DEFAULT_CAPABILITIES,
    capabilities,
    host_security,
    publish_address,
    ulimits,
)


def test_default_confinement_drops_everything_but_the_list():
    opts = host_security(DEFAULT_CAPABILITIES)
    assert opts["cap_drop"] == ["ALL"]
    assert "NET_RAW" not in opts["cap_add"] and "IPC_LOCK" not in opts["cap_add"]
    assert opts["security_opt"] == ["no-new-privileges:true"]
    assert opts["pids_limit"] == 16384


def test_gpu_containers_also_get_ipc_lock_and_sys_nice():
    opts = host_security(["CHOWN"], devices=True)
    assert opts["cap_add"] == ["CHOWN", "IPC_LOCK", "SYS_NICE"]


def test_operator_switches():
    opts = host_security(["CHOWN"], no_new_privileges=False, pids_limit=0)
    assert "security_opt" not in opts and "pids_limit" not in opts
    with pytest.raises(SpecError, match="pids_limit"):
        host_security([], pids_limit=-1)


def test_capability_names_are_checked_and_normalised():
    assert capabilities(["cap_chown", "CHOWN", "kill"]) == ["CHOWN", "KILL"]
    for bad in (["ALL"], ["no such"], "CHOWN", [3]):
        with pytest.raises(SpecError):
            capabilities(bad)


def test_publish_address_prefers_explicit_then_the_compute_zone():
    addrs = ["127.0.0.1", "10.210.2.21", "10.210.3.21"]
    assert publish_address("127.0.0.1", "10.210.3.0/24", addrs) == "127.0.0.1"
    assert publish_address(None, "10.210.3.0/24", addrs) == "10.210.3.21"
    assert publish_address(None, None, addrs) == "0.0.0.0"
    with pytest.raises(
        SpecError, match=r"no address in 10\.9\.0\.0/16.*bai_session_publish_address"
    ):
        publish_address(None, "10.9.0.0/16", addrs)
    with pytest.raises(SpecError, match="expected an IP address"):
        publish_address("agent1", None, addrs)


def test_ulimits_default_and_ceiling():
    limits, notes = ulimits()
    assert limits == [
        {"name": "memlock", "soft": -1, "hard": -1},
        {"name": "nofile", "soft": 1048576, "hard": 1048576},
    ]
    assert notes == []
    # An agent that cannot raise limits: lowered to what it has, and said.
    limits, notes = ulimits(ceiling={"memlock": 8 * 1024**2, "nofile": 20000})
    assert [lim["hard"] for lim in limits] == [8 * 1024**2, 20000]
    assert len(notes) == 2 and "CAP_SYS_RESOURCE" in notes[0]
    limits, notes = ulimits(nofile=4096, ceiling={"memlock": -1, "nofile": 20000})
    assert [lim["hard"] for lim in limits] == [-1, 4096] and notes == []
    with pytest.raises(SpecError, match="nofile"):
        ulimits(nofile=10)
