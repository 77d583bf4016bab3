#!/usr/bin/python
"""Ansible module bai_gpu_facts: which accelerators a host has, as the bai_gpu fact."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_gpu_facts
short_description: Detect NVIDIA and AMD GPUs on a host and return them as the bai_gpu fact
description:
  - Runs on a compute agent and reads, without changing anything, what the host offers.
    It runs C(nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version
    --format=csv,noheader,nounits) for NVIDIA; C(/dev/kfd), the render nodes in
    C(/dev/dri) (their sysfs vendor, PCI address and VRAM) and, where installed,
    C(rocm-smi --json) or C(amd-smi list --json) for AMD (C(/opt/rocm/bin) is searched too).
  - A tool that is not installed is not an error. A host without accelerators gets
    C(vendor=none) and C(count=0).
  - A host with GPU hardware or device nodes but no working driver gets
    C(status=driver_missing) or C(status=driver_failed) and a C(problem) that says what
    to install or do; the module itself fails only with O(fail_on_problem=true).
  - GPUs on the PCI bus count as evidence of a missing driver only outside containers
    (C(/.dockerenv), C(/run/.containerenv)), because a container, such as a lab node,
    sees its host's PCI bus but not its GPUs.
  - NVIDIA wins when a host has both vendors; a warning says so.
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  timeout:
    description:
      - Seconds each detection command may run (a GPU in a bad state can make
        nvidia-smi hang). A command that runs out counts as failing.
    type: int
    default: 30
  fail_on_problem:
    description: Fail (with the C(problem) text) when a driver is missing or failing.
    type: bool
    default: false
attributes:
  facts:
    support: full
    description: Sets the C(bai_gpu) fact (RV(ansible_facts.bai_gpu)).
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.attributes.read_only
notes:
  - Device indices are nvidia-smi's (the ones Docker device requests and CDI names use);
    for AMD, the position among the AMD render nodes in device-number order.
  - MIG instances are not listed separately; a MIG-enabled GPU counts as one device.
"""

EXAMPLES = r"""
- name: Detect accelerators
  bai.cluster.bai_gpu_facts:

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ bai_gpu.count }} x {{ bai_gpu.model }} ({{ bai_gpu.vendor }})"
  when: bai_gpu.count > 0

- name: Stop at once on a host whose driver is broken
  bai.cluster.bai_gpu_facts:
    fail_on_problem: true
"""

RETURN = r"""
ansible_facts:
  description: The facts this module sets.
  returned: always
  type: dict
  contains:
    bai_gpu:
      description: What the host offers to session containers.
      returned: always
      type: dict
      contains:
        vendor:
          description:
            - C(nvidia), C(amd) or C(none); the failing vendor when
              RV(ansible_facts.bai_gpu.status) is not C(ok).
          type: str
        count:
          description: Number of usable devices (0 when none, or when the driver is unusable).
          type: int
        devices:
          description:
            - One entry per device, by index - C(index), C(uuid), C(model), C(memory_mib)
              and, for AMD devices, C(pci_bus) and C(render_node).
          type: list
          elements: dict
          sample: [{index: 0, uuid: GPU-6f0c5d4e-1b8a-7c33-0f4e-2a9d7b1c8e01,
                    model: NVIDIA H100 80GB HBM3, memory_mib: 81559}]
        driver_version:
          description: The driver's version, where the tool reports it.
          type: str
        model:
          description: The devices' model (models joined with C( + ) when they differ).
          type: str
        memory_mib:
          description: Memory of the smallest device, MiB.
          type: int
        total_memory_mib:
          description: Memory of all devices together, MiB.
          type: int
        status:
          description: C(ok), C(driver_missing) or C(driver_failed).
          type: str
        problem:
          description:
            - What is wrong and what to install or do; null when
              RV(ansible_facts.bai_gpu.status) is C(ok).
          type: str
        warnings:
          description: Things worth knowing that do not stop anything.
          type: list
          elements: str
        device_nodes:
          description: Device nodes found (C(/dev/nvidia0), C(/dev/kfd), C(/dev/dri/renderD128)...).
          type: list
          elements: str
        pci_devices:
          description: GPU PCI addresses of this vendor (empty inside containers).
          type: list
          elements: str
        tool:
          description: The tool the devices were read with, if any.
          type: str
        groups:
          description:
            - AMD only. Group name -> GID of C(video) and C(render), for the containers'
              extra groups.
          type: dict
msg:
  description: One line for people.
  returned: always
  type: str
  sample: 8 x NVIDIA H100 80GB HBM3 (81559 MiB each), driver 550.90.07
"""

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.gpu.common import STATUS_OK
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import detect
from ansible_collections.bai.cluster.plugins.module_utils.gpu.probe import HostProbe


def summary(facts: dict) -> str:
    if facts["status"] != STATUS_OK:
        return f"{facts['vendor']} driver problem: {facts['problem']}"
    if not facts["count"]:
        return "no accelerator"
    memory = f" ({facts['memory_mib']} MiB each)" if facts["memory_mib"] else ""
    driver = f", driver {facts['driver_version']}" if facts["driver_version"] else ""
    return f"{facts['count']} x {facts['model'] or facts['vendor'] + ' GPU'}{memory}{driver}"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "timeout": {"type": "int", "default": 30},
            "fail_on_problem": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {module.params['timeout']}")
    try:
        facts = detect(HostProbe(module.params["timeout"], module=module))
    except ValueError as exc:  # output a parser could not read
        module.fail_json(msg=f"cannot read the GPU tools' output: {exc}")
    for warning in facts["warnings"]:
        module.warn(warning)
    result = {"changed": False, "ansible_facts": {"bai_gpu": facts}, "msg": summary(facts)}
    if module.params["fail_on_problem"] and facts["status"] != STATUS_OK:
        module.fail_json(**{**result, "msg": facts["problem"]})
    module.exit_json(**result)


if __name__ == "__main__":
    main()
