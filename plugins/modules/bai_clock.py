#!/usr/bin/python
"""Ansible module bai_clock: this host's time and what keeps its clock in sync."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_clock
short_description: Read a host's clock and whether a time sync service keeps it
description:
  - Returns the host's time (RV(time)), so the caller can compare it with the
    controller's, and what keeps the clock in sync - C(timedatectl)'s answer where systemd
    runs, else the time sync daemons among the host's processes (C(chronyd), C(ntpd),
    C(systemd-timesyncd), ...) - and whether the host is a container (whose clock is its
    host's kernel clock).
  - Read-only; never reports a change. The judgement (role preflight) is in
    C(module_utils/hosts/clock.py).
version_added: "1.0.0"
author: bai-cluster developers (@bai-cluster)
options: {}
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.attributes.read_only
"""

EXAMPLES = r"""
- name: Read this host's clock
  bai.cluster.bai_clock:
  register: clock
"""

RETURN = r"""
time:
  description: The host's time when the module ran, seconds since the epoch.
  returned: success
  type: float
synchronized:
  description: C(timedatectl)'s C(NTPSynchronized) (null where it cannot say).
  returned: success
  type: bool
ntp:
  description:
    - C(timedatectl)'s C(NTP), whether a sync service is turned on (null where it cannot say).
  returned: success
  type: bool
daemons:
  description: Time sync daemons running on the host.
  returned: success
  type: list
  elements: str
container:
  description: Whether the host is a container (C(/.dockerenv) or C(/run/.containerenv)).
  returned: success
  type: bool
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.hosts.clock import (
    parse_timedatectl,
    sync_daemons,
)


def process_names() -> list[str]:
    names = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
                names.append(comm.read())
        except OSError:
            continue
    return names


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    now = time.time()
    flags: dict = {"ntp": None, "synchronized": None}
    tool = module.get_bin_path("timedatectl")
    if tool and os.path.isdir("/run/systemd/system"):
        rc, out, _err = module.run_command([tool, "show", "-p", "NTP", "-p", "NTPSynchronized"])
        if rc == 0:
            flags = parse_timedatectl(out)
    module.exit_json(
        changed=False,
        time=now,
        daemons=sync_daemons(process_names()),
        container=os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"),
        **flags,
    )


if __name__ == "__main__":
    main()
