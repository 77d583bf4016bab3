#!/usr/bin/python
"""Ansible module bai_session_signal: a signal to every member of a session on one agent."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_signal
short_description: Send a signal to the processes of every member of a session on this agent
description:
  - In each running container of the session on this agent, all at once, every process
    of user C(work) gets O(signal) - a batch session's command, what it started, what
    people run over SSH - but not SSH's own processes (C(sshd), and the C(ssh) clients
    a command such as mpirun keeps open to the other members).
  - playbooks/session_signal.yml runs it on every agent of a session at once
    (C(bai-cluster session signal NAME SIG)); docs/sessions.md, "Signals".
  - Processes without a handler for the signal take its default action (USR1 and TERM
    end them); nothing else changes.
version_added: "1.0.0"
author: bai-cluster developers (@bai-cluster)
options:
  session:
    description: Whose members get the signal (the session's name).
    type: str
    required: true
  session_id:
    description: The id of that session; only containers labelled with it get the signal.
    type: str
    required: true
  signal:
    description:
      - The signal, by name (C(USR1), C(SIGUSR1)) or number; one of HUP, INT, QUIT, USR1,
        USR2, ALRM, TERM, CONT, STOP, TSTP, WINCH.
    type: str
    required: true
  agent:
    description: This agent's inventory name (copied into the result).
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Names the containers that would get the signal; sends none.
  diff_mode:
    support: none
    description: Returns no diff.
  idempotent:
    support: none
    description: Every run sends the signal again.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.docker
"""

EXAMPLES = r"""
- name: Ask every member of session train to checkpoint (its command traps USR1)
  bai.cluster.bai_session_signal:
    session: train
    session_id: "{{ entry.reservation.session_id }}"
    signal: USR1
"""

RETURN = r"""
signal:
  description: The signal's name as sent (without SIG).
  returned: always
  type: str
  sample: USR1
agent:
  description: O(agent).
  returned: always
  type: str
members:
  description:
    - Per running container of the session here, C(processes) (how many got the signal)
      and C(at) (when it was sent, epoch seconds), or C(error).
  returned: always
  type: dict
  sample:
    bai-train-main1: {processes: 3, at: 1790000000.123}
"""

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_SESSION_ID
from ansible_collections.bai.cluster.plugins.module_utils.containers import signals
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    connect,
    error_text,
    session_containers,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module, says
from ansible_collections.bai.cluster.plugins.module_utils.session.signal_names import signal_name


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "session": {"type": "str", "required": True},
            "session_id": {"type": "str", "required": True},
            "signal": {"type": "str", "required": True},
            "agent": {"type": "str", "default": ""},
            **DOCKER_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params

    def run() -> dict:
        name = signal_name(p["signal"])
        docker_ = connect(module)
        rows = [
            c
            for c in session_containers(docker_.api, p["session"], p["agent"])
            if c["labels"].get(LABEL_SESSION_ID) == p["session_id"]
        ]
        members: dict[str, dict]
        if module.check_mode:
            members = {c["name"]: {} for c in rows if c["state"] == "running"}
        else:
            members = signals.deliver(docker_.api, rows, name)
        return {"changed": bool(members), "signal": name, "agent": p["agent"], "members": members}

    run_module(
        module,
        run,
        (SpecError, says(bad_input=True)),
        (DockerException, says(f"Docker error on session {p['session']}: ", error_text)),
    )


if __name__ == "__main__":
    main()
