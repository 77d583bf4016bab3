"""bai_gpu: GPU detection and device allocation, without a GPU.

SIMULATED: no machine that runs these tests has a GPU. The tools' outputs come from
tests/unit/fixtures/gpu/ (their README says what each one stands for), and the host
(device nodes, sysfs, PATH) is a FakeProbe. What is real: the parsing, the decisions
``detect`` takes from that evidence, and the allocator's guarantees (checked with
hypothesis over random device sets, holdings and requests).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.bai.cluster.plugins.module_utils.gpu import (
    LABEL_GPU_DEVICES,
    STATUS_DRIVER_FAILED,
    STATUS_DRIVER_MISSING,
    STATUS_OK,
    GpuAllocationError,
    GpuDevice,
    GpuError,
    HostProbe,
    allocate_devices,
    detect,
    devices_in_use,
    docker_gpu_options,
    format_device_label,
    gpu_env,
    gpu_facts,
    merge_amd_devices,
    nvidia_smi_problem,
    parse_amd_smi_list,
    parse_device_label,
    parse_nvidia_smi_csv,
    parse_render_nodes,
    parse_rocm_smi_json,
)
from hypothesis import given, settings
from hypothesis import strategies as st

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- A host made of dicts ----------------------------------------------------------------
class FakeProbe:
    """The host as detect() sees it: files (path -> text), directories (path -> names),
    tools (name -> (rc, stdout, stderr)), symlink targets, groups, container or not."""

    def __init__(
        self,
        *,
        files=None,
        dirs=None,
        tools=None,
        links=None,
        groups=None,
        container=False,
        tool_dir="/usr/bin",
    ):
        self.files = dict(files or {})
        self.dirs = {k: list(v) for k, v in (dirs or {}).items()}
        self.tools = dict(tools or {})
        self.links = dict(links or {})
        self.groups = dict(groups or {})
        self.container = container
        self.tool_dir = tool_dir
        self.ran = []

    def which(self, name):
        if name in self.tools and self.tool_dir != "/opt/rocm/bin":
            return f"{self.tool_dir}/{name}"
        return None

    def exists(self, path):
        tool = path.rsplit("/", 1)[-1]
        if tool in self.tools and path == f"{self.tool_dir}/{tool}":
            return True
        return path in self.files or path in self.dirs or path in self.links

    def run(self, argv):
        self.ran.append(list(argv))
        return self.tools[argv[0].rsplit("/", 1)[-1]]

    def listdir(self, path):
        return list(self.dirs.get(path, []))

    def read(self, path):
        return self.files.get(path)

    def realpath(self, path):
        return self.links.get(path, path)

    def gid(self, name):
        return self.groups.get(name)

    def in_container(self):
        return self.container


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


def amd_host(count=8, tools=None, tool_dir="/opt/rocm/bin"):
    buses = ["0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0"]
    buses += ["0000:85:00.0", "0000:a6:00.0", "0000:c6:00.0", "0000:e5:00.0"]
    files, links = {}, {}
    nodes = [f"renderD{128 + i}" for i in range(count)]
    for node, bus in zip(nodes, buses):
        base = f"/sys/class/drm/{node}/device"
        files[f"{base}/vendor"] = "0x1002\n"
        files[f"{base}/mem_info_vram_total"] = "205822885888\n"
        links[base] = f"/sys/devices/pci0000:00/0000:00:01.1/0000:02:00.0/{bus}"
    # An Intel iGPU render node, not a ROCm device.
    files["/sys/class/drm/renderD200/device/vendor"] = "0x8086\n"
    dirs = {
        "/dev": ["kfd", "dri", "null"],
        "/dev/dri": ["by-path", *[f"card{i + 1}" for i in range(count)], *nodes, "renderD200"],
    }
    files["/dev/kfd"] = ""
    return FakeProbe(
        files=files,
        dirs=dirs,
        links=links,
        tools=tools or {},
        tool_dir=tool_dir,
        groups={"video": 44, "render": 993},
    )


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
H100 = parse_nvidia_smi_csv(fixture("nvidia-smi_h100x8.csv"))[0]


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


# --- handing devices to Docker, environment --------------------------------------------------
def test_docker_options_for_nvidia_device_requests_and_cdi():
    facts = gpu_facts("nvidia", H100)
    assert docker_gpu_options(facts, [3, 2]) == {
        "device_requests": [
            {"driver": "nvidia", "device_ids": ["2", "3"], "capabilities": [["gpu"]]}
        ]
    }
    assert docker_gpu_options(facts, [0], method="cdi") == {
        "device_requests": [{"driver": "cdi", "device_ids": ["nvidia.com/gpu=0"]}]
    }
    assert docker_gpu_options(facts, []) == {}
    with pytest.raises(GpuError, match="not among"):
        docker_gpu_options(facts, [8])
    with pytest.raises(GpuError, match="method"):
        docker_gpu_options(facts, [0], method="runtime")


def test_docker_options_for_amd_pass_kfd_the_render_nodes_and_the_groups():
    facts = detect(amd_host(4, tools={"rocm-smi": (0, fixture("rocm-smi_mi300x8.json"), "")}))
    assert docker_gpu_options(facts, [1, 2]) == {
        "devices": [
            "/dev/kfd:/dev/kfd:rwm",
            "/dev/dri/renderD129:/dev/dri/renderD129:rwm",
            "/dev/dri/renderD130:/dev/dri/renderD130:rwm",
        ],
        "group_add": ["993", "44"],
    }


def test_docker_options_need_an_accelerator():
    with pytest.raises(GpuError, match="not among"):
        docker_gpu_options(gpu_facts("none"), [0])


def test_gpu_env():
    assert gpu_env("nvidia", 2) == {"GPU_COUNT": "2", "N_GPUS": "2"}
    assert gpu_env("nvidia", 0) == {
        "GPU_COUNT": "0",
        "N_GPUS": "0",
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    assert gpu_env("none", 0) == {"GPU_COUNT": "0", "N_GPUS": "0"}


# --- check-gpu-node.sh against shim tools ----------------------------------------------------
# SIMULATED: nvidia-smi, nvidia-ctk and docker are small scripts on PATH that answer like
# a healthy 2-GPU node, or broken in one way (SHIM_BREAK). What is real: the script's
# steps, its "exactly this device" and "no GPU without a request" logic, its messages
# and exit codes. (tests/integration/test_gpu_lab.py runs it against a real engine.)
SCRIPT = Path(__file__).resolve().parents[2] / "roles/gpu_runtime/files/check-gpu-node.sh"
UUID0 = "GPU-6f0c5d4e-1b8a-7c33-0f4e-2a9d7b1c8e01"
UUID1 = "GPU-0b7a2e91-5c4d-3f86-a1e2-9c3b5d7f1a22"
SHIMS = {
    "nvidia-smi": f"""#!/bin/sh
case "$*" in
  *--query-gpu*)
    echo "0, {UUID0}, NVIDIA H100 80GB HBM3, 550.90.07"
    echo "1, {UUID1}, NVIDIA H100 80GB HBM3, 550.90.07" ;;
esac
""",
    "nvidia-ctk": """#!/bin/sh
case "$*" in
  --version) echo "NVIDIA Container Toolkit CLI version 1.17.8" ;;
  "cdi list") printf 'nvidia.com/gpu=0\\nnvidia.com/gpu=1\\nnvidia.com/gpu=all\\n' ;;
esac
""",
    "docker": f"""#!/bin/bash
b=${{SHIM_BREAK:-}}
case "$1" in
  info)
    case "$*" in
      *Runtimes*)
        if [ "$b" = no-runtime ]; then echo '{{"runc":{{}}}}'
        else echo '{{"nvidia":{{"path":"x"}},"runc":{{}}}}'; fi ;;
      *DefaultRuntime*) [ "$b" = default-runtime ] && echo nvidia || echo runc ;;
    esac ;;
  image) exit 0 ;;
  run)
    case "$*" in
      *"--gpus device=0"*)
        echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUID0})"
        [ "$b" = two-gpus ] && echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: {UUID1})" ;;
      *"--device nvidia.com/gpu=0"*)
        [ "$b" = no-cdi ] && {{ echo "docker: Error response: unknown device"; exit 125; }}
        echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUID0})" ;;
      *) [ "$b" = leak ] && echo /dev/nvidia0 ;;
    esac ;;
esac
exit 0
""",
}


@pytest.fixture
def shim_node(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in SHIMS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    spec = tmp_path / "nvidia.yaml"
    spec.write_text("cdiVersion: 0.5.0\n")

    def run(*args, breaks="", specs=str(spec)):
        env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "SHIM_BREAK": breaks,
            "CHECK_GPU_CDI_SPECS": specs,
        }
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr

    return run


def test_check_script_passes_on_a_healthy_node(shim_node):
    rc, out = shim_node("-i", "img")
    assert rc == 0, out
    assert f"container (--gpus device=0) sees exactly {UUID0}" in out
    assert f"(--device nvidia.com/gpu=0, CDI) sees exactly {UUID0}" in out
    assert "container without a GPU request sees none" in out
    assert out.rstrip().endswith("all checks passed")


@pytest.mark.parametrize(
    ("breaks", "args", "step"),
    [
        ("no-runtime", (), "FAIL 3. runtime: nvidia is not registered"),
        ("default-runtime", (), "FAIL 3. runtime: nvidia is the DEFAULT runtime"),
        ("two-gpus", (), "FAIL 5. container (--gpus device=0): expected exactly GPU 0"),
        ("no-cdi", ("--cdi", "yes"), "FAIL 6. container (CDI nvidia.com/gpu=0)"),
        ("leak", (), "FAIL 7. container without a GPU request sees GPUs"),
        ("", ("-d", "5"), "FAIL 1. driver: no GPU with index 5"),
    ],
)
def test_check_script_stops_at_the_first_failing_step(shim_node, breaks, args, step):
    rc, out = shim_node(*args, breaks=breaks)
    assert rc == 1 and step in out, out
    assert "all checks passed" not in out


def test_check_script_without_a_cdi_spec_or_a_cdi_engine(shim_node):
    rc, out = shim_node(specs="/nonexistent/nvidia.yaml")
    assert rc == 1 and "FAIL 4. CDI: no spec in /nonexistent/nvidia.yaml" in out
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in out
    rc, out = shim_node(breaks="no-cdi")  # --cdi auto: an engine without CDI is a skip
    assert rc == 0 and "skip     CDI container" in out, out


def test_check_script_rejects_bad_usage(shim_node):
    assert shim_node("-d", "x")[0] == 2
    assert shim_node("--vendor", "intel")[0] == 2
