"""Simulated GPU hosts and recorded tool outputs for the GPU unit tests.

SIMULATED: no machine that runs these tests has a GPU. The tools' outputs come from
tests/unit/fixtures/gpu/ (their README says what each one stands for), and the host
(device nodes, sysfs, PATH) is a ``FakeProbe``. test_gpu_facts.py, test_gpu_alloc.py and
test_gpu_docker.py share these.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import parse_nvidia_smi_csv

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


# Eight H100s, as nvidia-smi lists them.
H100 = parse_nvidia_smi_csv(fixture("nvidia-smi_h100x8.csv"))[0]
