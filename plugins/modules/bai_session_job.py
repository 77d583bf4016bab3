#!/usr/bin/python
"""Ansible module bai_session_job: a batch session's command on one agent."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_job
short_description: Start a batch session's command, read how far it is, read its output
description:
  - A batch session (docs/sessions.md, "Batch sessions") runs one command in main1 once
    every container is up; M(bai.cluster.bai_session_containers) made its containers with
    the toolkit's job runner.
  - O(state=started), on main1's agent, starts the command (the runner waits for it) and
    returns once the runner has recorded the start. Started already - no change.
  - O(state=status) reads the session's containers on this agent (state, exit code,
    whether the kernel killed them for memory, when they stopped) and, when main1 is here,
    its status file (when the command started and ended, its exit status, a member main1
    saw gone, a stop). The filter C(bai.cluster.bai_job_result) puts every agent's answer
    together.
  - O(state=output) returns what O(host) printed - for main1 of a batch session its
    command's output - from its container, or, once the session is gone, what was kept of
    it on this agent (under O(log_dir), when the session was destroyed).
version_added: "0.3.0"
author: bai-cluster developers (@bai-cluster)
options:
  session:
    description: The session name.
    type: str
    required: true
  session_id:
    description:
      - The session id; required for O(state=output) once the session is gone (the
        session ledger's record of its end has it).
    type: str
  state:
    description: What to do.
    type: str
    choices: [started, status, output]
    default: status
  host:
    description: With O(state=output), the member (C(main1), C(sub1), ...).
    type: str
    default: main1
  agent:
    description: This agent's inventory name (copied into each member's C(agent)).
    type: str
    default: ""
  log_dir:
    description: Where a destroyed batch session's output was kept on this agent.
    type: path
    default: /var/lib/bai-cluster/logs
  attempt:
    description:
      - A batch session that restarted (its gang started again, C(session_restarts)) -
        only that attempt's containers (0 the first), or with O(state=output) its kept
        output. Omitted, any.
    type: int
  wait:
    description: With O(state=started), seconds to wait for the runner to record the start.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: O(state=started) says whether it would start the command; the others only read.
  diff_mode:
    support: none
    description: Nothing to compare.
  idempotent:
    support: full
    description: The command starts once; reads change nothing.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.docker
"""

EXAMPLES = r"""
- name: Start the command of batch session train on main1's agent
  bai.cluster.bai_session_job:
    session: train
    state: started
  delegate_to: agent1

- name: Read batch session train's containers on every agent it uses
  bai.cluster.bai_session_job:
    session: train
    agent: "{{ item }}"
  delegate_to: "{{ item }}"
  loop: [agent1, agent2]
  register: job

- name: What they came to
  ansible.builtin.debug:
    msg: "{{ job.results | bai.cluster.bai_job_result }}"
"""

RETURN = r"""
members:
  description:
    - O(state=status) - the session's containers on this agent - C(host), C(main),
      C(agent), C(state) (Docker's), C(exit_code) and C(finished_at) (epoch seconds) once
      stopped, C(oom_killed).
  returned: O(state=status)
  type: list
  elements: dict
status:
  description:
    - main1's status file when main1 is on this agent (C(started), C(ended) epoch seconds,
      C(exit), C(lost), C(cancelled)), else null.
  returned: O(state=status), O(state=started)
  type: dict
output:
  description: O(state=output) - what O(host) printed (text; bytes that are not UTF-8 replaced).
  returned: O(state=output)
  type: str
source:
  description: O(state=output) - C(container) (it exists) or C(kept) (the session is gone).
  returned: O(state=output)
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_HOST,
    LABEL_RESTART_COUNT,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    connect,
    error_text,
    session_containers,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module, says
from ansible_collections.bai.cluster.plugins.module_utils.jobs import job_docker


def run(module: AnsibleModule, api) -> dict:
    p = module.params
    rows = session_containers(api, p["session"], p["agent"])
    if p["session_id"]:
        rows = [r for r in rows if r["labels"].get(LABEL_SESSION_ID) == p["session_id"]]
    if p["attempt"] is not None:  # a batch session that restarted: that attempt's only
        rows = [r for r in rows if r["labels"].get(LABEL_RESTART_COUNT) == str(p["attempt"])]
    batch = job_docker.batch_rows(rows)
    if p["state"] == "output":
        row = next((r for r in rows if r["labels"].get(LABEL_HOST) == p["host"]), None)
        if row is not None:
            data = job_docker.output(api, row)
            return {
                "changed": False,
                "output": data.decode("utf-8", "replace"),
                "source": "container",
            }
        if not p["session_id"]:
            raise Failure(f"session {p['session']}: no container {p['host']} on this agent")
        kept = job_docker.kept_output(
            p["log_dir"], p["session"], p["session_id"], p["host"], p["attempt"]
        )
        if kept is None:
            raise Failure(
                f"session {p['session']} ({p['session_id']}): nothing of {p['host']} was kept "
                f"on this agent (under {p['log_dir']})"
            )
        return {"changed": False, "output": kept.decode("utf-8", "replace"), "source": "kept"}
    if rows and not batch:
        raise Failure(f"session {p['session']} is not a batch session")
    if p["state"] == "started":
        main = job_docker.main_row(batch)
        if main is None:
            raise Failure(f"main1 of batch session {p['session']} is not on this agent")
        if module.check_mode:
            started = job_docker.status(api, main["id"]).get("started") is None
            return {"changed": started, "status": job_docker.status(api, main["id"])}
        changed = job_docker.start(api, batch, float(p["wait"]))
        return {"changed": changed, "status": job_docker.status(api, main["id"])}
    return {"changed": False, **job_docker.report(api, batch, p["agent"])}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "session": {"type": "str", "required": True},
            "session_id": {"type": "str"},
            "state": {
                "type": "str",
                "choices": ["started", "status", "output"],
                "default": "status",
            },
            "host": {"type": "str", "default": "main1"},
            "agent": {"type": "str", "default": ""},
            "log_dir": {"type": "path", "default": job_docker.DEFAULT_LOG_DIR},
            "attempt": {"type": "int"},
            "wait": {"type": "int", "default": 10},
            **DOCKER_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    docker_ = connect(module)
    run_module(
        module,
        lambda: run(module, docker_.api),
        (Failure, str),
        (
            DockerException,
            says(f"Docker error on session {module.params['session']}: ", error_text),
        ),
    )


if __name__ == "__main__":
    main()
