"""GPU facts: which accelerators a host has, read from the vendors' tools, as pure functions.

Why a separate file: the ``bai_gpu_facts`` module ships it to agents (Python 3.9+, stdlib
only) and the unit tests run it against recorded tool outputs, because the machines that
build and test this toolkit have no GPU. The logic is pure: ``detect`` reads the host
only through a *probe* object the caller supplies: ``HostProbe`` (gpu/probe.py) is
the read-only probe for a real host, so that every module running on an
agent (bai_gpu_facts, the session modules) can call ``detect(HostProbe(module=module))``
without an extra Ansible task (commands then run through ``module.run_command``); the
tests pass a fake probe.

Two parts:

- parsers for what the vendors' tools print (``nvidia-smi --query-gpu ... --format=csv``,
  ``rocm-smi ... --json``, ``amd-smi list --json``) and for a ``/dev/dri`` listing;
- ``detect``: which accelerator a host has, or why its driver is unusable, as the
  ``bai_gpu`` facts dict (``gpu_facts``).

Which devices a container gets is gpu_alloc.py; what Docker is given for them,
gpu_docker.py; the vendor and status names and ``GpuError``, gpu_common.py.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import GpuError
from ansible_collections.bai.cluster.plugins.module_utils.gpu.common import (
    STATUS_DRIVER_FAILED,
    STATUS_DRIVER_MISSING,
    STATUS_OK,
    VENDOR_AMD,
    VENDOR_NONE,
    VENDOR_NVIDIA,
)

NVIDIA_SMI_ARGS = (
    "--query-gpu=index,uuid,name,memory.total,driver_version",
    "--format=csv,noheader,nounits",
)
# rocm-smi ships with every ROCm release (5.x, 6.x) and in Debian/Ubuntu (package
# rocm-smi); amd-smi is its successor (ROCm 6+) and the fallback here.
ROCM_SMI_ARGS = (
    "--showproductname",
    "--showmeminfo",
    "vram",
    "--showuniqueid",
    "--showbus",
    "--showdriverversion",
    "--json",
)
AMD_SMI_ARGS = ("list", "--json")
# ROCm installs its tools under /opt/rocm/bin, which is often not on a service's PATH.
EXTRA_TOOL_DIRS = ("/opt/rocm/bin", "/usr/local/bin", "/usr/bin", "/usr/sbin")

# Groups that own /dev/kfd and /dev/dri/renderD* (udev rules of amdgpu/ROCm and systemd).
AMD_DEVICE_GROUPS = ("video", "render")

PCI_VENDOR_NVIDIA = "0x10de"
PCI_VENDOR_AMD = "0x1002"
# PCI base class/subclass of GPUs: VGA, 3D controller, other display, processing accelerator.
_GPU_PCI_CLASSES = ("0x0300", "0x0302", "0x0380", "0x1200")

_NVIDIA_NODE_RE = re.compile(r"^nvidia([0-9]+)$")
_RENDER_RE = re.compile(r"^renderD([0-9]+)$")
_CARD_KEY_RE = re.compile(r"^card:?([0-9]+)$", re.IGNORECASE)
_BDF_RE = re.compile(r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")
_NA_VALUES = ("", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]")
MIB = 1024 * 1024

# What to install, per distribution family, when a driver is missing (shown to people).
NVIDIA_DRIVER_HINT = (
    "install the NVIDIA driver for this GPU and reboot: on Ubuntu `ubuntu-drivers install "
    "--gpgpu` (or apt-get install nvidia-driver-<branch>-server nvidia-utils-<branch>-server), "
    "on Debian apt-get install nvidia-driver nvidia-smi (non-free), or cuda-drivers from "
    "NVIDIA's CUDA repository"
)
AMD_DRIVER_HINT = (
    "install the amdgpu driver with ROCm's installer (amdgpu-install --usecase=dkms,rocm "
    "from repo.radeon.com) and reboot, so that /dev/kfd and /dev/dri/renderD* appear"
)


@dataclass(frozen=True)
class GpuDevice:
    """One accelerator. ``index`` is the vendor tool's index (nvidia-smi's, which Docker's
    device requests and CDI names use; for AMD the position among the render nodes)."""

    index: int
    uuid: Optional[str] = None
    model: Optional[str] = None
    memory_mib: Optional[int] = None
    pci_bus: Optional[str] = None
    render_node: Optional[str] = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "memory_mib": self.memory_mib,
        }
        if self.pci_bus is not None:
            data["pci_bus"] = self.pci_bus
        if self.render_node is not None:
            data["render_node"] = self.render_node
        return data


# --- Small helpers -----------------------------------------------------------------------
def _clean(value: Any) -> Optional[str]:
    """A tool's text value, or None for its ways of saying "not available"."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in _NA_VALUES else text


def _int_or_none(value: Any) -> Optional[int]:
    text = _clean(value)
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def _bdf(value: Any) -> Optional[str]:
    """A PCI address as ``dddd:bb:dd.f`` in lower case (tools differ in case and in
    whether they print the domain as 4 or 8 digits)."""
    text = _clean(value)
    if text is None:
        return None
    match = _BDF_RE.search(text)
    return match.group(1).lower() if match else None


def _json_document(text: str, tool: str) -> Any:
    """The JSON a tool printed; ROCm tools may print warning lines before it."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        raise GpuError(f"{tool} printed no JSON: {text.strip()[:200]!r}")
    try:
        return json.loads(text[min(starts) :])
    except ValueError as exc:
        raise GpuError(f"{tool} printed JSON that does not parse: {exc}") from None


def _get(mapping: Mapping[str, Any], *names: str) -> Any:
    """The value of the first key matching one of ``names``, ignoring case (rocm-smi
    renamed "Card series" to "Card Series" between releases)."""
    lowered = {str(key).lower(): value for key, value in mapping.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


# --- NVIDIA ------------------------------------------------------------------------------
def parse_nvidia_smi_csv(text: str) -> tuple[list[GpuDevice], Optional[str]]:
    """Parse ``nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version
    --format=csv,noheader,nounits``: one line per GPU, memory in MiB. Returns the devices
    (sorted by index) and the driver version. Raises ``GpuError`` on lines that are not
    such rows (e.g. an error message printed with exit code 0)."""
    devices: list[GpuDevice] = []
    drivers: list[str] = []
    lines = [line for line in text.splitlines() if line.strip()]
    for row in csv.reader(lines, skipinitialspace=True):
        if len(row) < 5:
            raise GpuError(f"nvidia-smi printed an unexpected line: {', '.join(row)!r}")
        # A model name could hold a comma; index and uuid lead, memory and driver end.
        index_text, uuid, memory, driver = row[0], row[1], row[-2], row[-1]
        name = ", ".join(part.strip() for part in row[2:-2])
        index = _int_or_none(index_text)
        if index is None or index < 0:
            raise GpuError(f"nvidia-smi printed a line without a GPU index: {row!r}")
        devices.append(GpuDevice(index, _clean(uuid), _clean(name), _int_or_none(memory)))
        if _clean(driver):
            drivers.append(str(_clean(driver)))
    indices = [device.index for device in devices]
    if len(set(indices)) != len(indices):
        raise GpuError(f"nvidia-smi listed a GPU index twice: {indices}")
    return sorted(devices, key=lambda d: d.index), (drivers[0] if drivers else None)


def nvidia_smi_problem(rc: int, output: str) -> Optional[str]:
    """Why nvidia-smi failed, in words that say what to do; None when it worked or when
    it only says that this host has no NVIDIA GPU ("No devices were found")."""
    text = " ".join(output.split())
    if rc == 0:
        return None
    if "No devices were found" in text:
        return None
    if "version mismatch" in text.lower():
        return (
            f"nvidia-smi: {text[:300]} -- the loaded kernel module and the installed "
            "driver libraries differ (usually a driver upgrade without a reboot): reboot "
            "the host, or unload and reload the nvidia kernel modules"
        )
    if "couldn't communicate with the NVIDIA driver" in text or "NVIDIA driver" in text:
        return (
            f"nvidia-smi: {text[:300]} -- the NVIDIA kernel module is not loaded: "
            f"{NVIDIA_DRIVER_HINT}"
        )
    return f"nvidia-smi failed (exit code {rc}): {text[:300] or 'no output'}"


# --- AMD ---------------------------------------------------------------------------------
def parse_rocm_smi_json(text: str) -> tuple[list[GpuDevice], Optional[str]]:
    """Parse ``rocm-smi --showproductname --showmeminfo vram --showuniqueid --showbus
    --showdriverversion --json``: an object keyed ``card0``, ``card1``... (``card:0``
    on some builds) plus ``system`` with the driver version. Key names differ between
    ROCm releases ("Card series" in 5.x, "Card Series" in 6.x); VRAM is in bytes."""
    data = _json_document(text, "rocm-smi")
    if not isinstance(data, Mapping):
        raise GpuError(f"rocm-smi printed {type(data).__name__} JSON, expected an object")
    devices = []
    for key, card in data.items():
        match = _CARD_KEY_RE.match(str(key))
        if not match or not isinstance(card, Mapping):
            continue
        vram = _int_or_none(_get(card, "VRAM Total Memory (B)", "vram_total"))
        model = _clean(_get(card, "Card Series", "Card series", "Device Name", "Card SKU"))
        devices.append(
            GpuDevice(
                index=int(match.group(1)),
                uuid=_clean(_get(card, "Unique ID", "UUID")),
                model=model,
                memory_mib=vram // MIB if vram is not None else None,
                pci_bus=_bdf(_get(card, "PCI Bus", "PCI Bus ID")),
            )
        )
    system = data.get("system") if isinstance(data.get("system"), Mapping) else {}
    driver = _clean(_get(system or {}, "Driver version", "driver_version"))
    return sorted(devices, key=lambda d: d.index), driver


def parse_amd_smi_list(text: str) -> list[GpuDevice]:
    """Parse ``amd-smi list --json``: a list of ``{"gpu": N, "bdf": ..., "uuid": ...}``
    (older releases wrap the fields under "gpu_<N>"-like keys; both are read)."""
    data = _json_document(text, "amd-smi")
    items = data if isinstance(data, list) else [data]
    devices = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        index = _int_or_none(_get(item, "gpu"))
        if index is None:
            continue
        devices.append(
            GpuDevice(index, _clean(_get(item, "uuid")), None, None, _bdf(_get(item, "bdf")))
        )
    return sorted(devices, key=lambda d: d.index)


def parse_render_nodes(listing: Iterable[str] | str) -> list[str]:
    """Render nodes (``renderD128``...) from a ``/dev/dri`` listing (``ls`` output or
    names), in device-number order: the order ROCm enumerates GPUs in."""
    names = listing.split() if isinstance(listing, str) else list(listing)
    found = {}
    for name in names:
        base = str(name).rstrip("/").rsplit("/", 1)[-1]
        match = _RENDER_RE.match(base)
        if match:
            found[base] = int(match.group(1))
    return sorted(found, key=found.__getitem__)


# --- Facts -------------------------------------------------------------------------------
def gpu_facts(
    vendor: str,
    devices: Sequence[GpuDevice] = (),
    driver_version: Optional[str] = None,
    *,
    status: str = STATUS_OK,
    problem: Optional[str] = None,
    warnings: Sequence[str] = (),
    extra: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """The ``bai_gpu`` facts: vendor, count, devices and summary figures for placement.
    ``model`` is the devices' model when they agree (else the models joined with " + ");
    ``memory_mib`` is the smallest device's memory (what one device can be relied on for)."""
    usable = status == STATUS_OK
    devs = list(devices) if usable else []
    models = list(dict.fromkeys(d.model for d in devs if d.model))
    memories = [d.memory_mib for d in devs if d.memory_mib is not None]
    facts: dict[str, Any] = {
        "vendor": vendor if devs else VENDOR_NONE,
        "count": len(devs),
        "devices": [d.as_dict() for d in devs],
        "driver_version": driver_version if devs else None,
        "model": " + ".join(models) if models else None,
        "memory_mib": min(memories) if memories else None,
        "total_memory_mib": sum(memories) if memories else None,
        "status": status,
        "problem": problem,
        "warnings": list(warnings),
    }
    if not usable:
        facts["vendor"] = vendor
    facts.update(extra or {})
    return facts


def detect(probe: Any) -> dict[str, Any]:
    """Detect the host's accelerators through ``probe`` and return ``gpu_facts``.

    ``probe`` reads the host and changes nothing: ``which(name)`` -> path or None,
    ``run(argv)`` -> (rc, stdout, stderr), ``listdir(path)`` -> names ([] if missing),
    ``exists(path)``, ``read(path)`` -> text or None, ``realpath(path)``,
    ``gid(group)`` -> number or None, and ``in_container()``. NVIDIA wins when a host
    has both vendors (with a warning).

    A driver problem is reported, not raised: ``status`` says ``driver_missing`` (GPU
    hardware or device nodes without a working driver) or ``driver_failed`` (the tool
    runs but fails), and ``problem`` says what to install or do.
    """
    pci = _pci_gpus(probe)
    nvidia = _detect_nvidia(probe, [p for p in pci if p["vendor"] == PCI_VENDOR_NVIDIA])
    amd = _detect_amd(probe, [p for p in pci if p["vendor"] == PCI_VENDOR_AMD])
    for found in (nvidia, amd):
        if found is not None and found["status"] != STATUS_OK:
            return found
    if nvidia is not None and amd is not None:
        nvidia["warnings"].append(
            f"this host also has {amd['count']} AMD GPU(s); only the NVIDIA GPUs are offered"
        )
    none: dict[str, Any] = {"device_nodes": [], "pci_devices": [], "tool": None}
    return nvidia or amd or gpu_facts(VENDOR_NONE, extra=none)


def _pci_gpus(probe: Any) -> list[dict[str, str]]:
    """GPU-class PCI functions (vendor, bdf). Inside a container (the lab's nodes) the
    host's PCI bus shows through /sys but its GPUs are not this node's, so: none."""
    if probe.in_container():
        return []
    found = []
    for bdf in sorted(probe.listdir("/sys/bus/pci/devices")):
        base = f"/sys/bus/pci/devices/{bdf}"
        vendor = (probe.read(f"{base}/vendor") or "").strip().lower()
        klass = (probe.read(f"{base}/class") or "").strip().lower()
        if vendor in (PCI_VENDOR_NVIDIA, PCI_VENDOR_AMD) and klass[:6] in _GPU_PCI_CLASSES:
            found.append({"vendor": vendor, "bdf": bdf.lower()})
    return found


def find_tool(probe: Any, name: str) -> Optional[str]:
    """``name`` on PATH or in the directories vendors install into (/opt/rocm/bin)."""
    path = probe.which(name)
    if path:
        return path
    for folder in EXTRA_TOOL_DIRS:
        candidate = f"{folder}/{name}"
        if probe.exists(candidate):
            return candidate
    return None


def _detect_nvidia(probe: Any, pci: list[dict[str, str]]) -> Optional[dict[str, Any]]:
    nodes = sorted(n for n in probe.listdir("/dev") if _NVIDIA_NODE_RE.match(n))
    smi = find_tool(probe, "nvidia-smi")
    evidence = {
        "device_nodes": [f"/dev/{n}" for n in nodes],
        "pci_devices": [p["bdf"] for p in pci],
    }
    if smi is None:
        if nodes:
            return gpu_facts(
                VENDOR_NVIDIA,
                status=STATUS_DRIVER_MISSING,
                problem=(
                    f"NVIDIA device nodes exist ({', '.join(evidence['device_nodes'])}) but "
                    "nvidia-smi is not installed, so the driver's user-space part is "
                    f"missing: {NVIDIA_DRIVER_HINT}"
                ),
                extra=evidence,
            )
        if pci:
            return gpu_facts(
                VENDOR_NVIDIA,
                status=STATUS_DRIVER_MISSING,
                problem=(
                    f"NVIDIA GPU(s) on the PCI bus ({', '.join(evidence['pci_devices'])}) "
                    f"but no NVIDIA driver is loaded: {NVIDIA_DRIVER_HINT}"
                ),
                extra=evidence,
            )
        return None
    rc, out, err = probe.run([smi, *NVIDIA_SMI_ARGS])
    problem = nvidia_smi_problem(rc, f"{out}\n{err}")
    if problem:
        return gpu_facts(
            VENDOR_NVIDIA, status=STATUS_DRIVER_FAILED, problem=problem, extra=evidence
        )
    devices, driver = parse_nvidia_smi_csv(out) if rc == 0 else ([], None)
    if not devices:
        if nodes or pci:
            seen = ", ".join(evidence["device_nodes"] + evidence["pci_devices"])
            return gpu_facts(
                VENDOR_NVIDIA,
                status=STATUS_DRIVER_FAILED,
                problem=(
                    f"nvidia-smi lists no GPU although {seen} exist: check `nvidia-smi -q` "
                    "and the kernel log (dmesg | grep -i nvrm)"
                ),
                extra=evidence,
            )
        return None  # driver installed on a host without NVIDIA GPUs
    return gpu_facts(VENDOR_NVIDIA, devices, driver, extra={**evidence, "tool": smi})


def _amd_node_info(probe: Any, node: str) -> dict[str, Any]:
    base = f"/sys/class/drm/{node}/device"
    vram = _int_or_none(probe.read(f"{base}/mem_info_vram_total"))
    return {
        "vendor": (probe.read(f"{base}/vendor") or "").strip().lower() or None,
        "bdf": _bdf(probe.realpath(base).rsplit("/", 1)[-1]) if probe.exists(base) else None,
        "memory_mib": vram // MIB if vram is not None else None,
        "model": _clean(probe.read(f"{base}/product_name")),
    }


def _detect_amd(probe: Any, pci: list[dict[str, str]]) -> Optional[dict[str, Any]]:
    kfd = probe.exists("/dev/kfd")
    nodes = []
    for node in parse_render_nodes(probe.listdir("/dev/dri")):
        info = _amd_node_info(probe, node)
        # Render nodes of other vendors (an Intel iGPU, a virtual GPU) are not ROCm devices.
        if info["vendor"] in (None, PCI_VENDOR_AMD):
            nodes.append((node, info))
    evidence = {
        "device_nodes": (["/dev/kfd"] if kfd else []) + [f"/dev/dri/{n}" for n, _info in nodes],
        "pci_devices": [p["bdf"] for p in pci],
    }
    if not kfd:
        if pci:
            return gpu_facts(
                VENDOR_AMD,
                status=STATUS_DRIVER_MISSING,
                problem=(
                    f"AMD GPU(s) on the PCI bus ({', '.join(evidence['pci_devices'])}) but "
                    "/dev/kfd is missing (no amdgpu driver with compute support): "
                    f"{AMD_DRIVER_HINT}"
                ),
                extra=evidence,
            )
        return None
    if not nodes:
        return gpu_facts(
            VENDOR_AMD,
            status=STATUS_DRIVER_FAILED,
            problem=(
                "/dev/kfd exists but there is no AMD render node in /dev/dri: check that "
                "the amdgpu driver bound the GPUs (dmesg | grep amdgpu)"
            ),
            extra=evidence,
        )
    tool_devices, driver, tool = _amd_tool_devices(probe)
    devices = merge_amd_devices(nodes, tool_devices)
    # Containers get the device nodes' groups by number (the image may lack the names).
    groups = {name: probe.gid(name) for name in AMD_DEVICE_GROUPS}
    extra = {**evidence, "tool": tool, "groups": {k: v for k, v in groups.items() if v is not None}}
    return gpu_facts(VENDOR_AMD, devices, driver, extra=extra)


def _amd_tool_devices(probe: Any) -> tuple[list[GpuDevice], Optional[str], Optional[str]]:
    """What rocm-smi (else amd-smi) says; nothing when neither is installed or both fail:
    the render nodes and sysfs still give count and memory."""
    rocm = find_tool(probe, "rocm-smi")
    if rocm:
        rc, out, _err = probe.run([rocm, *ROCM_SMI_ARGS])
        if rc == 0:
            try:
                devices, driver = parse_rocm_smi_json(out)
                return devices, driver, rocm
            except GpuError:
                pass
    amdsmi = find_tool(probe, "amd-smi")
    if amdsmi:
        rc, out, _err = probe.run([amdsmi, *AMD_SMI_ARGS])
        if rc == 0:
            try:
                return parse_amd_smi_list(out), None, amdsmi
            except GpuError:
                pass
    return [], None, None


def merge_amd_devices(
    nodes: Sequence[tuple[str, Mapping[str, Any]]], tool_devices: Sequence[GpuDevice]
) -> list[GpuDevice]:
    """One device per AMD render node, in render-node order (index 0 = the lowest node),
    enriched with what the tool reported: matched by PCI address where both know it, by
    position where either does not (a node whose known address the tool does not list
    gets nothing from the tool)."""
    by_bus = {d.pci_bus: d for d in tool_devices if d.pci_bus}
    devices = []
    for position, (node, info) in enumerate(nodes):
        bdf = info.get("bdf")
        tool = by_bus.get(bdf) if bdf and by_bus else None
        if (not bdf or not by_bus) and position < len(tool_devices):
            tool = tool_devices[position]
        devices.append(
            GpuDevice(
                index=position,
                uuid=tool.uuid if tool else None,
                model=(tool.model if tool and tool.model else info.get("model")),
                memory_mib=(
                    tool.memory_mib if tool and tool.memory_mib else info.get("memory_mib")
                ),
                pci_bus=info.get("bdf") or (tool.pci_bus if tool else None),
                render_node=f"/dev/dri/{node}",
            )
        )
    return devices
