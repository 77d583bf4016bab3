#!/usr/bin/python
# Copyright: contributors to the bai.cluster collection
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check an agent's own health (the agent-side half of the health gate)."""

DOCUMENTATION = r"""
module: bai_agent_health
short_description: Check an agent's own health, as the health gate's agent-side checks
version_added: "0.1.0"
description:
  - Runs on an agent and checks, with no session involved, what a session placed there
    would need. V(engine) - the Docker engine answers and, in a swarm, its node is
    active. V(overlay) - a ping carrying the route's MTU with don't-fragment set reaches
    each swarm manager the engine knows (the path session overlays' VXLAN frames take;
    this agent's own address is left out). V(data) - each of O(data_roots) exists, and
    each of O(data_mounts) is a mount. V(devices) - the GPUs are detected and usable, at
    least O(gpu) of them. V(disk) - the engine's data root (or O(disk_path)) has at least
    O(disk_floor) free.
  - Changes nothing. A failing check is not a module failure - RV(healthy) and
    RV(checks) say it (the caller decides, e.g. playbooks/agent_check.yml fails the run
    and the housekeeping pass pauses the agent). Only a bad request fails.
  - A tool the agent lacks (C(ping)) turns its check into V(skip), said in RV(checks).
options:
  checks:
    description: The checks to run, in this order.
    type: list
    elements: str
    choices: [engine, overlay, data, devices, disk]
    default: [engine, overlay, data, devices, disk]
  data_roots:
    description: The agent's data folders (the inventory's C(bai_data_roots)).
    type: list
    elements: path
    default: []
  data_mounts:
    description:
      - Folders that must be mounts (the NFS export's mount point), checked with
        O(data_roots).
    type: list
    elements: path
    default: []
  gpu:
    description: The GPU count the inventory declares for the agent; fewer found fails.
    type: int
    default: 0
  gpu_detect:
    description: Detect the GPUs; V(false) skips V(devices).
    type: bool
    default: true
  gpu_detect_timeout:
    description: Seconds the GPU tools (nvidia-smi, rocm-smi) may take.
    type: int
    default: 30
  disk_floor:
    description: The least free space, in bytes or as C(10g), C(512m).
    type: str
    default: 10g
  disk_path:
    description: The folder whose file system is checked; default the engine's data root.
    type: path
requirements:
  - docker (Python SDK) on the agent
author: bai-cluster developers (@bai-cluster)
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.attributes.read_only
  - bai.cluster.docker
"""

EXAMPLES = r"""
- name: Check this agent
  bai.cluster.bai_agent_health:
    data_roots: "{{ hostvars[inventory_hostname] | bai.cluster.bai_data_roots }}"
    gpu: "{{ bai_agent_resources.gpu | default(0) }}"
    disk_floor: 20g
  register: health
"""

RETURN = r"""
healthy:
  description: No check failed.
  returned: success
  type: bool
failed_checks:
  description: The names of the checks that failed.
  returned: success
  type: list
  elements: str
checks:
  description:
    - Each check run, in order - C(check), C(status) (C(ok), C(FAILED) or C(skip)) and
      C(detail) (what it measured or why it failed).
  returned: success
  type: list
  elements: dict
  sample:
    - check: disk
      status: FAILED
      detail: 1.2 GiB free in /var/lib/docker (floor 10.0 GiB)
"""

import re

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    Docker,
    DockerException,
    error_text,
    require_docker,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module, says
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import detect
from ansible_collections.bai.cluster.plugins.module_utils.gpu.probe import HostProbe
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_health as health

_DEV = re.compile(r" dev (\S+)")


def mtu_to(module: AnsibleModule, address: str) -> int:
    """The MTU of the interface the route to ``address`` leaves by (1500 when unknown)."""
    ip = module.get_bin_path("ip")
    rc, out, _err = module.run_command([ip, "-o", "route", "get", address]) if ip else (1, "", "")
    found = _DEV.search(out) if rc == 0 else None
    if found is None:
        return 1500
    try:
        with open(f"/sys/class/net/{found.group(1)}/mtu", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1500


def ping(module: AnsibleModule, tool: str, address: str, size: int) -> "str | None":
    """The round trip (ms) of a don't-fragment ping of ``size`` bytes; three tries."""
    for _try in range(3):
        rc, out, _err = module.run_command(
            [tool, "-c", "1", "-W", "2", "-M", "do", "-s", str(size), address]
        )
        if rc == 0 and health.rtt_of(out):
            return health.rtt_of(out)
    return None


def engine_info(module: AnsibleModule) -> "tuple[dict | None, str]":
    require_docker(module)
    try:
        docker_ = Docker(module.params["docker_host"], module.params["docker_timeout"])
        return docker_.api.info(), ""
    except DockerException as exc:
        return None, error_text(exc)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "checks": {"type": "list", "elements": "str", "choices": list(health.CHECKS),
                       "default": list(health.CHECKS)},
            "data_roots": {"type": "list", "elements": "path", "default": []},
            "data_mounts": {"type": "list", "elements": "path", "default": []},
            "gpu": {"type": "int", "default": 0},
            "gpu_detect": {"type": "bool", "default": True},
            "gpu_detect_timeout": {"type": "int", "default": 30},
            "disk_floor": {"type": "str", "default": "10g"},
            "disk_path": {"type": "path"},
            **DOCKER_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )  # fmt: skip
    p = module.params

    def run() -> dict:
        try:
            floor = health.size_bytes(p["disk_floor"])
        except ValueError as exc:
            raise SpecError(f"disk_floor: {exc}") from None
        info, error = engine_info(module)
        tool = module.get_bin_path("ping")
        own = [str((info or {}).get("Swarm", {}).get("NodeAddr") or "")]
        checks = {
            "engine": lambda: health.engine(info, error),
            "overlay": lambda: (
                health.overlay(
                    health.managers(info),
                    lambda a: mtu_to(module, a),
                    lambda a, size: ping(module, tool, a, size),
                    own,
                )
                if tool
                else health.Finding("overlay", "skip", "no ping on this agent")
            ),
            "data": lambda: health.data(p["data_roots"], p["data_mounts"]),
            "devices": lambda: health.devices(
                detect(HostProbe(p["gpu_detect_timeout"], module=module))
                if p["gpu_detect"]
                else None,
                p["gpu"],
            ),
            "disk": lambda: health.disk(
                p["disk_path"] or str((info or {}).get("DockerRootDir") or "/var/lib/docker"),
                floor,
            ),
        }
        return {"changed": False, **health.report(checks[name]() for name in p["checks"])}

    run_module(module, run, (SpecError, says(bad_input=True)))


if __name__ == "__main__":
    main()
