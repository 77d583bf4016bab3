#!/usr/bin/python
"""Ansible module bai_session_repair: start again what an engine restart left stopped."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_repair
short_description: Start a running session's stopped containers again, then check its SSH mesh
description:
  - After an agent's engine restarts, Docker does not always bring back a container
    attached to a swarm overlay (docs/sessions.md, "After a restart"), and a container
    someone stopped stays stopped. M(bai.cluster.bai_session_ledger)'s reconcile
    (O(bai.cluster.bai_session_ledger#module:state=reconciled)) names such containers of
    running interactive sessions (RV(bai.cluster.bai_session_ledger#module:stopped)) and
    where to check each session's mesh afterwards
    (RV(bai.cluster.bai_session_ledger#module:recheck)); playbooks/session_reconcile.yml
    runs this module with them.
  - O(start) starts the named containers of this agent, all at once, as a create's rerun
    starts them - only behind the session isolation table (table C(inet bai_isolation)),
    learning the session overlay again where the engine lost it - and waits until sshd
    listens in each. A container running by now is left alone; one that is gone, or of a
    batch session, is refused.
  - O(recheck) then logs in, as user C(work), from each session's master to each of its
    hosts (tried again twice, 5 s apart, while the overlay settles).
  - A session's trouble is reported in its RV(sessions) entry and never stops another's;
    the module fails only when it cannot talk to the engine.
version_added: "1.0.0"
author: bai-cluster developers (@bai-cluster)
options:
  agent:
    description: This agent's inventory name (in messages, and for the isolation table).
    type: str
    required: true
  start:
    description:
      - The containers to start on this agent, one entry per session (the rows of this
        agent in RV(bai.cluster.bai_session_ledger#module:stopped)).
    type: list
    elements: dict
    default: []
    suboptions:
      agent:
        description: The agent the row is for; a row for another agent is skipped.
        type: str
      session:
        description: The session name.
        type: str
        required: true
      session_id:
        description: Its session id (only containers labelled with it are started).
        type: str
        required: true
      containers:
        description: The names of its containers to start.
        type: list
        elements: str
        required: true
  recheck:
    description:
      - The sessions whose mesh to check from their master on this agent (the rows of
        this agent in RV(bai.cluster.bai_session_ledger#module:recheck)).
    type: list
    elements: dict
    default: []
    suboptions:
      agent:
        description: Where its master runs; a row for another agent is skipped.
        type: str
      session:
        description: Whose mesh to check (the session's name).
        type: str
        required: true
      session_id:
        description: The id of that session.
        type: str
        required: true
      master:
        description: The container to log in from.
        type: str
        required: true
      hosts:
        description: Every host of the session (C(main1), C(sub1), ...).
        type: list
        elements: str
        required: true
  ssh_timeout:
    description: Seconds each started container may take until its sshd listens.
    type: int
    default: 60
  workers:
    description: Containers started at once.
    type: int
    default: 16
attributes:
  check_mode:
    support: full
    description: Says which containers it would start; checks no mesh.
  diff_mode:
    support: none
    description: Returns no diff; RV(sessions) says what was started.
  idempotent:
    support: full
    description: A container that runs is left alone, so a second run starts nothing.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.docker
"""

EXAMPLES = r"""
- name: Start what the engine restart left stopped of session train on this agent
  bai.cluster.bai_session_repair:
    agent: agent2
    start:
      - session: train
        session_id: 6f1c2d7e-0b8a-4a59-9f0e-2b8a1c3d4e5f
        containers: [bai-train-sub1]

- name: Check its mesh from main1, on main1's agent
  bai.cluster.bai_session_repair:
    agent: agent1
    recheck:
      - session: train
        session_id: 6f1c2d7e-0b8a-4a59-9f0e-2b8a1c3d4e5f
        master: bai-train-main1
        hosts: [main1, sub1, sub2]
"""

RETURN = r"""
sessions:
  description:
    - Per session, C(started) (the containers started, or that check mode would start),
      C(mesh) (the mesh check's lines, C(ok HOST) each) and C(error) (what went wrong;
      absent when nothing did).
  returned: always
  type: dict
  sample:
    train:
      started: [bai-train-sub1]
      mesh: [ok main1, ok sub1, ok sub2]
"""

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.containers import repair
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    connect,
    error_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module, says

_SESSION = {
    "agent": {"type": "str"},
    "session": {"type": "str", "required": True},
    "session_id": {"type": "str", "required": True},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "agent": {"type": "str", "required": True},
            "start": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    **_SESSION,
                    "containers": {"type": "list", "elements": "str", "required": True},
                },
            },
            "recheck": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    **_SESSION,
                    "master": {"type": "str", "required": True},
                    "hosts": {"type": "list", "elements": "str", "required": True},
                },
            },
            "ssh_timeout": {"type": "int", "default": 60},
            "workers": {"type": "int", "default": 16},
            **DOCKER_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    docker_ = connect(module)
    p = module.params

    def mine(rows: list) -> list:
        return [r for r in rows if r.get("agent") in (None, p["agent"])]

    def run() -> dict:
        sessions = repair.start_stopped(
            module,
            docker_,
            p["agent"],
            mine(p["start"]),
            ssh_timeout=p["ssh_timeout"],
            workers=p["workers"],
        )
        if not module.check_mode:
            repair.merge(sessions, repair.recheck(docker_.api, mine(p["recheck"])))
        changed = any(outcome["started"] for outcome in sessions.values())
        return {"changed": changed, "sessions": sessions}

    run_module(module, run, (DockerException, says(f"Docker error on {p['agent']}: ", error_text)))


if __name__ == "__main__":
    main()
