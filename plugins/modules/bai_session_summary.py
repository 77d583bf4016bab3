#!/usr/bin/python
"""Ansible module bai_session_summary: one row per session from every agent's containers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_summary
short_description: Summarise cluster sessions from the containers found on every agent
description:
  - Pure computation on the controller (used by C(playbooks/session_list.yml)).
  - Groups session containers by session name and id and returns one row per session
    with its size, mode (as placed), agents and state, the session's health (C(running)
    when every container runs, C(degraded) when all are there and some do not run,
    C(stopped) when none does, C(incomplete) when containers are missing), plus a
    fixed-width table.
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  agent_info:
    description:
      - The registered C(results) of a looped M(bai.cluster.bai_agent_info) task (without
        C(name)).
    type: list
    elements: dict
    default: []
  containers:
    description:
      - More containers (C(agent), C(name), C(state), C(labels)), added to those of
        O(agent_info).
    type: list
    elements: dict
    default: []
  unreached:
    description:
      - Agents that were not read (they did not answer). A session that the session
        ledger (O(reservations)) places on one of them gets the state C(unreachable), and
        C(unreachable) names those agents; a session only there is listed from its
        reservation.
    type: list
    elements: str
    default: []
  reservations:
    description:
      - The session ledger's reservations by session name (the C(sessions) of
        RV(bai.cluster.bai_session_ledger#module:ledger)).
    type: dict
    default: {}
  ledger_time:
    description:
      - The ledger's time when O(reservations) was read
        (RV(bai.cluster.bai_session_ledger#module:ledger_time)); with it, a session with a
        lifetime gets C(time_left), the seconds it may still run.
    type: float
  queue:
    description:
      - The sessions PENDING in the session ledger's queue
        (RV(bai.cluster.bai_session_ledger#module:queue)); listed after the others, in
        queue order, with the state C(PENDING), C(position) and C(reason).
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    description: Pure computation; runs the same in check mode.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.attributes.read_only
"""

EXAMPLES = r"""
- name: Summarise the sessions
  bai.cluster.bai_session_summary:
    agent_info: "{{ info.results }}"
  register: sessions
"""

RETURN = r"""
sessions:
  description:
    - One entry per session, sorted by name - C(name), C(session_id), C(size), C(found),
      C(running), C(mode), C(resource_group), C(owner), C(agents), C(hosts), C(state) (and
      C(unreachable), the agents that did not answer, when the state is C(unreachable)),
      and for a session with a lifetime C(lifetime_s) and C(time_left) (seconds, with
      O(ledger_time)); then the queued sessions of O(queue) (state C(PENDING), with
      C(position), C(reason) and C(submitted_at)).
  returned: success
  type: list
  elements: dict
table:
  description: The same as lines of a fixed-width table with a header.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import (
    format_table,
    queued_rows,
    summarize_sessions,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "agent_info": {"type": "list", "elements": "dict", "default": []},
            "containers": {"type": "list", "elements": "dict", "default": []},
            "unreached": {"type": "list", "elements": "str", "default": []},
            "reservations": {"type": "dict", "default": {}},
            "ledger_time": {"type": "float"},
            "queue": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    containers = list(module.params["containers"])
    for result in module.params["agent_info"]:
        containers.extend(result.get("containers") or [])
    rows = summarize_sessions(
        containers,
        module.params["reservations"],
        module.params["unreached"],
        now=module.params["ledger_time"],
    )
    rows += queued_rows(module.params["queue"])
    module.exit_json(changed=False, sessions=rows, table=format_table(rows))


if __name__ == "__main__":
    main()
