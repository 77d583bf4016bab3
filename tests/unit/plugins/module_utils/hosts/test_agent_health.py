"""An agent's own health checks (hosts/agent_health.py), and bai_agent_health run as a
module. The verdicts are given any answer here; the lab's test_agents_lab runs the
module on real agents with real faults (a path that drops full-size packets, a disk
floor above what is free).

SIMULATED in the module tests: the engine's ``info``, the pings and the GPU detection
(patched); the data folders and the disk are this machine's."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import gpu_facts
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_health as health
from ansible_collections.bai.cluster.plugins.modules import bai_agent_health
from containers_fake import NO_GPU
from docker_fake import run_module

SWARM = {
    "ServerVersion": "20.10.24",
    "DockerRootDir": "/",
    "Swarm": {
        "LocalNodeState": "active",
        "NodeAddr": "10.0.0.21",
        "RemoteManagers": [
            {"NodeID": "a", "Addr": "10.0.0.11:2377"},
            {"NodeID": "b", "Addr": "10.0.0.12:2377"},
        ],
    },
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10g", 10 * 1024**3), ("512M", 512 * 1024**2), ("1.5t", int(1.5 * 1024**4)),
     ("4096", 4096), ("2GiB", 2 * 1024**3)],
)  # fmt: skip
def test_sizes(text, expected):
    assert health.size_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "ten", "10x", "-1g"])
def test_a_size_that_is_none_says_so(text):
    with pytest.raises(ValueError, match="not a size"):
        health.size_bytes(text)


def test_the_engine_answers_in_its_swarm_or_not():
    assert health.engine(SWARM).status == "ok"
    assert "not in a swarm" in health.engine({"Swarm": {}}).detail
    pending = health.engine({"Swarm": {"LocalNodeState": "pending"}})
    assert (pending.status, pending.detail) == ("FAILED", "answers, but its swarm node is pending")
    gone = health.engine(None, "connection refused")
    assert gone.status == "FAILED" and "connection refused" in gone.detail


def test_the_overlay_reaches_every_manager_but_itself_with_full_size_packets():
    asked = []

    def ping(address, size):
        asked.append((address, size))
        return None if address == "10.0.0.12" else "0.1"

    managers = health.managers(SWARM)
    assert managers == ["10.0.0.11", "10.0.0.12"]
    found = health.overlay(managers, lambda a: 1450, ping, own=["10.0.0.12"])
    assert (found.status, asked) == ("ok", [("10.0.0.11", 1422)])
    found = health.overlay(managers, lambda a: 1500, ping)
    assert found.status == "FAILED"
    assert (
        found.detail
        == "no full-size packet (don't fragment) reaches manager 10.0.0.12 (1500 bytes)"
    )
    assert health.overlay([], lambda a: 1500, ping).status == "skip"


def test_data_folders_are_there_and_the_nfs_mount_point_is_a_mount(tmp_path):
    there, gone = str(tmp_path), str(tmp_path / "gone")
    assert health.data([there], []).status == "ok"
    assert health.data([], []).status == "skip"
    missing = health.data([there, gone], [])
    assert (missing.status, missing.detail) == ("FAILED", f"{gone} is missing")
    unmounted = health.data([there], [there], ismount=lambda p: False)
    assert (unmounted.status, unmounted.detail) == ("FAILED", f"{there} is not mounted")
    assert health.data([there], [there], ismount=lambda p: True).status == "ok"


def test_devices_are_detected_usable_and_as_many_as_declared():
    two = {"status": "ok", "count": 2, "vendor": "nvidia"}
    assert health.devices(two, 2).detail == "2 nvidia GPU(s)"
    assert health.devices(two, 4).detail == "declares 4 GPU(s), 2 found"
    broken = health.devices({"status": "driver_missing", "problem": "install the driver"}, 2)
    assert (broken.status, broken.detail) == ("FAILED", "driver_missing: install the driver")
    assert health.devices(None, 2).status == "skip"
    assert health.devices(NO_GPU, 0).status == "ok"


def test_the_disk_has_its_floor_free():
    st = SimpleNamespace(f_bavail=5 * 1024, f_frsize=1024**2)  # 5 GiB
    low = health.disk("/var/lib/docker", 10 * 1024**3, statvfs=lambda p: st)
    assert low == health.Finding(
        "disk", "FAILED", "5.0 GiB free in /var/lib/docker (floor 10.0 GiB)"
    )
    assert health.disk("/x", 1024**3, statvfs=lambda p: st).status == "ok"

    def gone(path):
        raise FileNotFoundError(2, "No such file or directory")

    assert "No such file" in health.disk("/x", 1, statvfs=gone).detail


def test_the_report_and_its_summary_name_each_failed_check():
    found = [health.Finding("engine", "ok", "answers"), health.Finding("disk", "FAILED", "low")]
    result = health.report(found)
    assert (result["healthy"], result["failed_checks"]) == (False, ["disk"])
    assert "failed" not in result  # Ansible would read it as the task's failure
    assert health.summary("agent2", result) == "agent2: disk: low"
    assert health.summary("agent1", health.report(found[:1])) == "agent1: healthy (1 checks)"


# --- the module -------------------------------------------------------------------------
def module_run(engine, info, pings=None, facts=NO_GPU, **args):
    pings = pings or {}
    patches = {
        (bai_agent_health, "engine_info"): lambda module: (info, "" if info else "refused"),
        (bai_agent_health, "mtu_to"): lambda module, address: 1500,
        (bai_agent_health, "ping"): lambda module, tool, a, size: pings.get(a, "0.1"),
        (bai_agent_health, "detect"): lambda probe: facts,
        (AnsibleModule, "get_bin_path"): lambda self, name, *a, **k: f"/usr/bin/{name}",
    }
    return run_module(bai_agent_health, args, engine, patches=patches)


def test_the_module_reports_every_check_and_changes_nothing(engine, tmp_path):
    result = module_run(engine, SWARM, data_roots=[str(tmp_path)], disk_floor="1m")
    assert result["changed"] is False and result["healthy"] is True, result
    assert [c["check"] for c in result["checks"]] == list(health.CHECKS)
    assert {c["status"] for c in result["checks"]} == {"ok"}, result["checks"]


def test_the_module_names_what_failed_without_failing_itself(engine, tmp_path):
    free = os.statvfs("/").f_bavail * os.statvfs("/").f_frsize
    result = module_run(
        engine,
        SWARM,
        pings={"10.0.0.11": None},
        facts=gpu_facts("none", extra={"device_nodes": [], "pci_devices": [], "tool": None}),
        data_roots=[str(tmp_path / "gone")],
        gpu=2,
        disk_floor=str(free * 2),
    )
    assert not result.get("failed"), result
    assert result["failed_checks"] == ["overlay", "data", "devices", "disk"], result["checks"]


def test_an_engine_that_does_not_answer_fails_its_check_only(engine):
    result = module_run(engine, None, checks=["engine", "overlay", "disk"], disk_floor="1")
    by = {c["check"]: c for c in result["checks"]}
    assert by["engine"]["status"] == "FAILED" and "refused" in by["engine"]["detail"]
    assert by["overlay"]["status"] == "skip"
    # The engine would have said where its data root is: the default is checked.
    assert "/var/lib/docker" in by["disk"]["detail"], by["disk"]


def test_a_bad_floor_is_refused(engine):
    result = module_run(engine, SWARM, disk_floor="lots")
    assert result["failed"] and "disk_floor: not a size: 'lots'" in result["msg"], result
