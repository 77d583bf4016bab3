#!/usr/bin/python
"""Ansible module bai_session_app: a session's apps in main1, and the start of one."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_app
short_description: List a session's apps in main1, or start one on its first open
description:
  - Runs on the agent that runs the session's main1 (playbooks/session_app.yml delegates
    it there; docs/apps.md). A session's apps are its image's (the image label
    C(ai.backend.service-ports), C(name:protocol:port) entries) and its own
    (C(session_apps), recorded on main1's label C(ai.backend.cluster.apps)); main1
    publishes each app's port toward the app proxy when it is made.
  - With O(app), the app is opened. When nothing listens on its port in main1, an image's
    app is started from the image's service definition
    (C(/etc/backend.ai/service-defs/APP.json), a JSON object whose C(command) is the
    argv, C({ports[0]}) standing for the port) as user C(work), in the first data folder,
    with main1's environment (the session's variables and the user's C(env)); its output
    goes to C(/tmp/bai-app-APP.log) in main1. The module waits until it listens; an app
    that ends first or does not listen within O(start_timeout) fails the task with the
    last lines of its log. An app that runs already is left alone; one that died is
    started again. A session's own app is started by its user, never here - it is only
    looked at.
  - Without O(app), nothing changes - the apps are listed.
version_added: "1.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  session:
    description: The session's name.
    type: str
    required: true
  session_id:
    description: The session's id; only a main1 labelled with it counts.
    type: str
    required: true
  app:
    description: The app to open (one of the session's apps); without it, the apps are listed.
    type: str
  start_timeout:
    description: Seconds an app may take to listen on its port after its start.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
    description: Says whether the app would be started and with which command; starts nothing.
  diff_mode:
    support: none
    description: Returns no diff.
  idempotent:
    support: full
    description: An app that listens already is left alone (changed false).
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.docker
"""

EXAMPLES = r"""
- name: Open JupyterLab in main1 of session train (start it if it is not running)
  bai.cluster.bai_session_app:
    session: train
    session_id: "{{ entry.reservation.session_id }}"
    app: jupyter
  delegate_to: "{{ main1_agent }}"
  register: opened
"""

RETURN = r"""
apps:
  description:
    - Every app of the session - C(name), C(protocol), C(port) (in main1), C(declared)
      (the session's own), C(host_address) and C(host_port) (where the agent publishes
      it), C(state) (C(running) when something listens on its port, else C(idle)).
  returned: always
  type: list
  elements: dict
  sample: [{name: jupyter, protocol: http, port: 8090, declared: false,
            host_address: 10.210.3.21, host_port: 30012, state: running}]
app:
  description:
    - With O(app), that app's entry of RV(apps), and C(url_path) (the path that opens it,
      from its service definition's C(url_path), else C(/)), C(start_s) (seconds to
      listen, when this run started it) and C(command) (its argv, when started).
  returned: when app is given
  type: dict
started:
  description: Whether this run started the app.
  returned: always
  type: bool
start_failed:
  description:
    - True when the task failed because the app it started ended or did not listen in
      time (the app proxy counts it as a failed start, for the metrics).
  returned: on failure of such a start
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.containers import apps_open
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    connect,
    error_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module, says


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "session": {"type": "str", "required": True},
            "session_id": {"type": "str", "required": True},
            "app": {"type": "str"},
            "start_timeout": {"type": "int", "default": 60},
            **DOCKER_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params

    def run() -> dict:
        api = connect(module).api
        info = apps_open.main1(api, p["session"], p["session_id"])
        result: dict = {"changed": False, "started": False}
        if p["app"]:
            app = apps_open.find(info, p["app"])
            apps_open.published(info, app)  # the open needs its port: Failure says why not
            opened = apps_open.open_app(
                api, info, app, p["start_timeout"], check_mode=module.check_mode
            )
            result.update(changed=opened.pop("changed"), started=opened["state"] == "started")
            entry = next(a for a in apps_open.describe(api, info) if a["name"] == app.name)
            if module.check_mode and opened["state"] == "started":
                entry["state"] = "started"
            path = apps_open.url_path(api, info["Id"], app)
            result["app"] = {**entry, **opened, "url_path": path}
        result["apps"] = apps_open.describe(api, info)
        return result

    run_module(
        module,
        run,
        (apps_open.StartFailure, says(f"session {p['session']}: ", start_failed=True)),
        ((Failure, SpecError), says(f"session {p['session']}: ")),
        (DockerException, says(f"Docker error on session {p['session']}: ", error_text)),
    )


if __name__ == "__main__":
    main()
