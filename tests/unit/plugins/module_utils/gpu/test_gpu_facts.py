"""bai_gpu facts: parsing the vendors' tools and detecting a host's GPUs, without a GPU.

SIMULATED: no machine that runs these tests has a GPU. The tools' outputs come from
tests/unit/fixtures/gpu/ (their README says what each one stands for), and the host
(device nodes, sysfs, PATH) is a FakeProbe (gpu_fakes.py). What is real: the parsing and
the decisions ``detect`` takes from that evidence; ``HostProbe`` runs on this GPU-less
machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import GpuError
from ansible_collections.bai.cluster.plugins.module_utils.gpu.common import (
    STATUS_DRIVER_FAILED,
    STATUS_DRIVER_MISSING,
    STATUS_OK,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import (
    GpuDevice,
    detect,
    gpu_facts,
    merge_amd_devices,
    nvidia_smi_problem,
    parse_amd_smi_list,
    parse_nvidia_smi_csv,
    parse_render_nodes,
    parse_rocm_smi_json,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.probe import HostProbe
from gpu_fakes import FakeProbe, amd_host, fixture


def pci(*devices):
    """sysfs entries for PCI functions given as (bdf, vendor, class)."""
    files = {}
    for bdf, vendor, klass in devices:
        files[f"/sys/bus/pci/devices/{bdf}/vendor"] = vendor + "\n"
        files[f"/sys/bus/pci/devices/{bdf}/class"] = klass + "\n"
    return files, {"/sys/bus/pci/devices": [d[0] for d in devices]}


NVIDIA_NODES = ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps", "null", "zero"]


# --- nvidia-smi ----------------------------------------------------------------------------
def test_nvidia_smi_h100_output_gives_eight_devices_and_the_driver():
    devices, driver = parse_nvidia_smi_csv(fixture("nvidia-smi_h100x8.csv"))
    assert driver == "550.90.07"
    assert [d.index for d in devices] == list(range(8))
    assert {d.model for d in devices} == {"NVIDIA H100 80GB HBM3"}
    assert {d.memory_mib for d in devices} == {81559}
    assert devices[0].uuid == "GPU-6f0c5d4e-1b8a-7c33-0f4e-2a9d7b1c8e01"
    assert len({d.uuid for d in devices}) == 8


def test_nvidia_smi_as_recorded_on_a_real_h100():
    devices, driver = parse_nvidia_smi_csv(fixture("nvidia-smi_h100x1_recorded.csv"))
    assert driver == "580.159.04"
    assert [(d.index, d.model, d.memory_mib) for d in devices] == [
        (0, "NVIDIA H100 80GB HBM3", 81559)
    ]
    assert devices[0].uuid.startswith("GPU-")


def test_nvidia_smi_mixed_models_and_not_available_memory():
    devices, _driver = parse_nvidia_smi_csv(fixture("nvidia-smi_workstation_mixed.csv"))
    assert [(d.model, d.memory_mib) for d in devices] == [
        ("NVIDIA GeForce RTX 4090", 24564),
        ("NVIDIA RTX A4000", 16376),
    ]
    facts = gpu_facts("nvidia", devices, "560.35.03")
    assert facts["model"] == "NVIDIA GeForce RTX 4090 + NVIDIA RTX A4000"
    assert facts["memory_mib"] == 16376  # what every device has at least
    assert facts["total_memory_mib"] == 24564 + 16376
    (device,), _driver = parse_nvidia_smi_csv(fixture("nvidia-smi_memory_na.csv"))
    assert device.memory_mib is None and device.model == "NVIDIA A100-SXM4-80GB"


def test_nvidia_smi_rows_are_sorted_and_a_comma_in_a_name_survives():
    text = "1, GPU-b, Some GPU, rev A, 1024, 550.1\n0, GPU-a, Plain, 2048, 550.1\n"
    devices, _driver = parse_nvidia_smi_csv(text)
    assert [(d.index, d.model) for d in devices] == [(0, "Plain"), (1, "Some GPU, rev A")]


@pytest.mark.parametrize(
    "text",
    [
        fixture("nvidia-smi_no_driver.txt"),
        "0, GPU-a, X, 1, 1\n0, GPU-b, X, 1, 1\n",  # an index twice
        "x, GPU-a, X, 1, 1\n",
    ],
)
def test_nvidia_smi_text_that_is_not_rows_is_refused(text):
    with pytest.raises(GpuError):
        parse_nvidia_smi_csv(text)


def test_nvidia_smi_failures_say_what_to_do():
    assert nvidia_smi_problem(0, "") is None
    assert nvidia_smi_problem(6, fixture("nvidia-smi_no_devices.txt")) is None
    no_driver = nvidia_smi_problem(9, fixture("nvidia-smi_no_driver.txt"))
    assert "kernel module is not loaded" in no_driver and "install the NVIDIA driver" in no_driver
    mismatch = nvidia_smi_problem(18, fixture("nvidia-smi_version_mismatch.txt"))
    assert "reboot" in mismatch
    assert "exit code 3" in nvidia_smi_problem(3, "something else")


# --- rocm-smi, amd-smi, /dev/dri -----------------------------------------------------------
def test_rocm_smi_mi300x_output():
    devices, driver = parse_rocm_smi_json(fixture("rocm-smi_mi300x8.json"))
    assert driver == "6.7.0"
    assert [d.index for d in devices] == list(range(8))
    assert {d.model for d in devices} == {"AMD Instinct MI300X OAM"}
    assert {d.memory_mib for d in devices} == {205822885888 // 2**20}
    assert devices[5].pci_bus == "0000:a6:00.0"
    assert devices[0].uuid == "0x18d1a5e1f6c4b2a9"


def test_rocm_smi_older_key_spelling_and_a_warning_line_before_the_json():
    devices, driver = parse_rocm_smi_json(fixture("rocm-smi_radeon_warning.txt"))
    assert driver == "5.18.13"
    assert devices[0].model == "Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]"
    assert devices[1].pci_bus == "0000:0b:00.0"  # upper case from the tool, normalised
    assert devices[1].uuid is None  # "N/A"


@pytest.mark.parametrize("text", ["", "rocm-smi: command failed", "[1, 2]", "{not json"])
def test_rocm_smi_garbage_is_refused(text):
    with pytest.raises(GpuError):
        parse_rocm_smi_json(text)


def test_amd_smi_list():
    devices = parse_amd_smi_list(fixture("amd-smi_list_mi300x4.json"))
    assert [(d.index, d.pci_bus) for d in devices] == [
        (0, "0000:05:00.0"),
        (1, "0000:26:00.0"),
        (2, "0000:46:00.0"),
        (3, "0000:65:00.0"),
    ]
    assert devices[0].uuid.startswith("00ff74a1")


def test_render_nodes_from_a_dev_dri_listing_in_number_order():
    nodes = parse_render_nodes(fixture("dev_dri_mi300x8.txt"))
    assert nodes == [f"renderD{n}" for n in range(128, 136)]
    assert parse_render_nodes(["renderD130", "/dev/dri/renderD129", "card1"]) == [
        "renderD129",
        "renderD130",
    ]


def test_amd_devices_are_matched_to_render_nodes_by_pci_address():
    tool, _driver = parse_rocm_smi_json(fixture("rocm-smi_mi300x8.json"))
    # Render nodes in another order than rocm-smi's cards: the PCI address decides.
    nodes = [
        ("renderD128", {"bdf": "0000:26:00.0"}),
        ("renderD129", {"bdf": "0000:05:00.0"}),
    ]
    merged = merge_amd_devices(nodes, tool)
    assert [(d.index, d.render_node, d.uuid) for d in merged] == [
        (0, "/dev/dri/renderD128", "0x2a3c4e5f6071829a"),
        (1, "/dev/dri/renderD129", "0x18d1a5e1f6c4b2a9"),
    ]
    # No PCI address from sysfs (no /sys/class/drm, e.g. in a container): by position.
    by_position = merge_amd_devices([("renderD128", {}), ("renderD129", {})], tool)
    assert [d.uuid for d in by_position] == ["0x18d1a5e1f6c4b2a9", "0x2a3c4e5f6071829a"]
    assert by_position[1].pci_bus == "0000:26:00.0"
    # A node whose address the tool does not list gets nothing from the tool.
    stranger = merge_amd_devices([("renderD128", {"bdf": "0000:ff:00.0"})], tool)
    assert stranger[0].uuid is None and stranger[0].pci_bus == "0000:ff:00.0"
    # Nothing from a tool: sysfs alone still gives memory and model.
    alone = merge_amd_devices([("renderD128", {"memory_mib": 65536, "model": "X"})], [])
    assert alone == [GpuDevice(0, None, "X", 65536, None, "/dev/dri/renderD128")]


# --- detect(): the decisions, on simulated hosts -------------------------------------------
def test_no_accelerator_gives_count_zero_and_vendor_none():
    files, dirs = pci(
        ("0000:00:00.0", "0x8086", "0x060000"), ("0000:00:03.0", "0x1af4", "0x020000")
    )
    facts = detect(FakeProbe(files=files, dirs={**dirs, "/dev": ["null", "zero", "tty"]}))
    assert facts["vendor"] == "none" and facts["count"] == 0 and facts["devices"] == []
    assert facts["status"] == STATUS_OK and facts["problem"] is None


def test_nvidia_host_with_a_working_driver():
    files, dirs = pci(("0000:17:00.0", "0x10de", "0x030200"))
    probe = FakeProbe(
        files=files,
        dirs={**dirs, "/dev": NVIDIA_NODES},
        tools={"nvidia-smi": (0, fixture("nvidia-smi_a100x4.csv"), "")},
    )
    facts = detect(probe)
    assert facts["vendor"] == "nvidia" and facts["count"] == 4
    assert facts["model"] == "NVIDIA A100-SXM4-40GB" and facts["memory_mib"] == 40960
    assert facts["driver_version"] == "535.183.01"
    assert facts["devices"][3] == {
        "index": 3,
        "uuid": "GPU-f2b6d8a4-3e5c-4a1b-9d7f-6e8a0c2b4d43",
        "model": "NVIDIA A100-SXM4-40GB",
        "memory_mib": 40960,
    }
    assert probe.ran == [
        [
            "/usr/bin/nvidia-smi",
            "--query-gpu=index,uuid,name,memory.total,driver_version",
            "--format=csv,noheader,nounits",
        ]
    ]


def test_nvidia_device_nodes_without_nvidia_smi_is_a_missing_driver():
    facts = detect(FakeProbe(dirs={"/dev": NVIDIA_NODES}))
    assert facts["status"] == STATUS_DRIVER_MISSING and facts["count"] == 0
    assert "/dev/nvidia0" in facts["problem"] and "nvidia-smi is not installed" in facts["problem"]
    assert "install the NVIDIA driver" in facts["problem"]


def test_nvidia_gpu_on_the_pci_bus_without_any_driver():
    files, dirs = pci(
        ("0000:3b:00.0", "0x10de", "0x030200"), ("0000:3b:00.1", "0x10de", "0x040300")
    )
    facts = detect(FakeProbe(files=files, dirs=dirs))
    assert facts["status"] == STATUS_DRIVER_MISSING and facts["vendor"] == "nvidia"
    assert "0000:3b:00.0" in facts["problem"] and "0000:3b:00.1" not in facts["problem"]


def test_pci_evidence_is_ignored_inside_a_container():
    # A lab node (a container) sees the host's PCI bus, not its own GPUs.
    files, dirs = pci(("0000:3b:00.0", "0x10de", "0x030200"))
    facts = detect(FakeProbe(files=files, dirs=dirs, container=True))
    assert facts["status"] == STATUS_OK and facts["count"] == 0


def test_nvidia_smi_that_cannot_reach_the_driver_fails_with_what_to_do():
    probe = FakeProbe(
        dirs={"/dev": ["nvidiactl"]},
        tools={"nvidia-smi": (9, fixture("nvidia-smi_no_driver.txt"), "")},
    )
    facts = detect(probe)
    assert facts["status"] == STATUS_DRIVER_FAILED
    assert "install the NVIDIA driver" in facts["problem"]


def test_nvidia_smi_installed_on_a_host_without_nvidia_gpus_is_no_accelerator():
    probe = FakeProbe(tools={"nvidia-smi": (6, fixture("nvidia-smi_no_devices.txt"), "")})
    assert detect(probe)["count"] == 0 and detect(probe)["status"] == STATUS_OK


def test_nvidia_smi_listing_nothing_while_device_nodes_exist_is_a_failure():
    probe = FakeProbe(
        dirs={"/dev": NVIDIA_NODES},
        tools={"nvidia-smi": (6, fixture("nvidia-smi_no_devices.txt"), "")},
    )
    assert detect(probe)["status"] == STATUS_DRIVER_FAILED


def test_amd_host_with_rocm_smi_under_opt_rocm():
    probe = amd_host(tools={"rocm-smi": (0, fixture("rocm-smi_mi300x8.json"), "")})
    facts = detect(probe)
    assert facts["vendor"] == "amd" and facts["count"] == 8
    assert facts["model"] == "AMD Instinct MI300X OAM" and facts["driver_version"] == "6.7.0"
    assert facts["devices"][0]["render_node"] == "/dev/dri/renderD128"
    assert facts["devices"][7]["pci_bus"] == "0000:e5:00.0"
    assert facts["groups"] == {"video": 44, "render": 993}
    assert "/dev/dri/renderD200" not in facts["device_nodes"]
    assert probe.ran[0][0] == "/opt/rocm/bin/rocm-smi"


def test_amd_host_with_only_amd_smi_or_no_tool_still_counts_its_devices():
    facts = detect(amd_host(4, tools={"amd-smi": (0, fixture("amd-smi_list_mi300x4.json"), "")}))
    assert facts["count"] == 4 and facts["devices"][1]["uuid"].startswith("01ff74a1")
    bare = detect(amd_host(2))
    assert bare["count"] == 2 and bare["memory_mib"] == 205822885888 // 2**20
    assert bare["model"] is None and bare["tool"] is None


def test_amd_gpu_without_kfd_is_a_missing_driver():
    files, dirs = pci(("0000:05:00.0", "0x1002", "0x120000"))
    facts = detect(FakeProbe(files=files, dirs=dirs))
    assert facts["status"] == STATUS_DRIVER_MISSING and "amdgpu" in facts["problem"]


def test_a_failing_driver_is_reported_even_when_the_other_vendor_works():
    probe = amd_host(2)
    probe.dirs["/dev"] += ["nvidia0"]  # NVIDIA nodes, no nvidia-smi
    assert detect(probe)["status"] == STATUS_DRIVER_MISSING


def test_both_vendors_working_offers_nvidia_and_warns():
    probe = amd_host(2, tool_dir="/usr/bin")
    probe.tools["nvidia-smi"] = (0, fixture("nvidia-smi_workstation_mixed.csv"), "")
    facts = detect(probe)
    assert facts["vendor"] == "nvidia" and facts["count"] == 2
    assert "2 AMD GPU(s)" in facts["warnings"][0]


# --- HostProbe: the real (GPU-less) machine ------------------------------------------------
def test_host_probe_on_this_machine_finds_no_gpu():
    """Not simulated: the machines that run these tests have no GPU."""
    facts = detect(HostProbe(timeout=10))
    assert (facts["vendor"], facts["count"], facts["status"]) == ("none", 0, STATUS_OK), facts


def test_host_probe_commands_time_out_and_missing_ones_fail():
    probe = HostProbe(timeout=1)
    rc, _out, err = probe.run(["sleep", "5"])
    assert rc == 124 and "did not answer within 1 s" in err
    assert probe.run(["/nonexistent/nvidia-smi"])[0] == 127
    assert probe.listdir("/nonexistent") == [] and probe.read("/nonexistent") is None
    assert probe.gid("root") == 0 and probe.gid("no-such-group-here") is None


def test_host_probe_in_a_module_runs_commands_through_run_command(monkeypatch):
    """In a module, commands go through ``module.run_command`` (under timeout(1)) and
    answer exactly as without a module."""
    with patch_module_args({}):
        module = AnsibleModule(argument_spec={})
    calls = []
    run_command = module.run_command

    def recording_run_command(args, **kwargs):
        calls.append(args)
        return run_command(args, **kwargs)

    monkeypatch.setattr(module, "run_command", recording_run_command)
    probe, local = HostProbe(timeout=1, module=module), HostProbe(timeout=1)
    for argv in (
        ["sleep", "5"],
        ["bash", "-c", "trap '' TERM; sleep 5"],
        ["/nonexistent/nvidia-smi"],
        ["bash", "-c", "echo out; echo err >&2; echo $LC_ALL; exit 3"],
    ):
        assert probe.run(argv) == local.run(argv), argv
    assert len(calls) == 4 and all(Path(args[0]).name == "timeout" for args in calls)
    assert detect(HostProbe(timeout=10, module=module)) == detect(HostProbe(timeout=10))
