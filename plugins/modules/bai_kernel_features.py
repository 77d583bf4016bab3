#!/usr/bin/python
"""Ansible module bai_kernel_features: does this host's kernel have what the roles need."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_kernel_features
short_description: Check that a host's kernel has the features the roles rely on
description:
  - Looks, without loading anything, for each of O(features) in the running kernel
    (C(/sys/module), paths under C(/proc) that only the feature makes, its symbols in
    C(/proc/kallsyms), which also shows code built in without a C(/sys/module) entry),
    then in C(/lib/modules/RELEASE/modules.builtin) and C(modules.dep) (a loadable
    module counts, since the kernel, Docker or nftables load it on first use).
  - Works where C(modprobe) cannot (containers, locked-down hosts); never loads a module.
  - Read-only; never reports a change. Fails only on an unknown feature name; missing
    features are returned in RV(missing) with what to install or change, for the caller
    (role preflight) to report.
version_added: "1.0.0"
author: bai-cluster developers (@bai-cluster)
options:
  features:
    description: Features to look for.
    type: list
    elements: str
    required: true
    choices: [bridge, br_netfilter, vxlan, nf_tables]
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.attributes.read_only
"""

EXAMPLES = r"""
- name: Look for the kernel features of an agent
  bai.cluster.bai_kernel_features:
    features: [bridge, br_netfilter, vxlan, nf_tables]
  register: kernel

- name: Stop when one is missing
  ansible.builtin.assert:
    that: kernel.missing | length == 0
    fail_msg: "{{ kernel.missing | map(attribute='fix') | join(' ') }}"
"""

RETURN = r"""
release:
  description: The running kernel's release (C(uname -r)).
  returned: success
  type: str
  sample: 6.1.0-27-amd64
features:
  description: Per feature, whether it is present and how it was found.
  returned: success
  type: dict
  sample: {vxlan: {name: vxlan, present: true, how: in the running kernel, fix: ""}}
missing:
  description: The features not found, each with C(fix), what to install or change.
  returned: success
  type: list
  elements: dict
  sample: [{name: vxlan, present: false, how: missing, fix: "vxlan: the running kernel ..."}]
"""

import os

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.hosts.kernel import (
    FEATURES,
    assess,
    kallsyms_names,
    module_names,
)


def read_lines(path: str) -> list[str]:
    """A text file's lines, [] when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()
    except OSError:
        return []


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "features": {
                "type": "list",
                "elements": "str",
                "required": True,
                "choices": sorted(FEATURES),
            }
        },
        supports_check_mode=True,
    )
    names = list(dict.fromkeys(module.params["features"]))
    release = os.uname().release
    probes = {path for name in names for path in FEATURES[name].paths}
    wanted = {symbol for name in names for symbol in FEATURES[name].symbols}
    present_paths = {path for path in probes if os.path.exists(path)}
    symbols = kallsyms_names(read_lines("/proc/kallsyms"), wanted)
    modules_dir = os.path.join("/lib/modules", release)
    builtin = module_names(read_lines(os.path.join(modules_dir, "modules.builtin")))
    loadable = module_names(read_lines(os.path.join(modules_dir, "modules.dep")))
    verdicts = {
        name: assess(
            name,
            release=release,
            paths=present_paths,
            symbols=symbols,
            builtin=builtin,
            loadable=loadable,
        )
        for name in names
    }
    module.exit_json(
        changed=False,
        release=release,
        features=verdicts,
        missing=[verdict for verdict in verdicts.values() if not verdict["present"]],
    )


if __name__ == "__main__":
    main()
