# Copyright: the bai.cluster authors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback ``bai.cluster.in_process_imports``: the modules that run inside the
controller's process (plugins/plugin_utils/in_process.py) imported once, in the main
process, so that every worker finds them imported."""

from __future__ import annotations

DOCUMENTATION = r"""
name: in_process_imports
author: bai-cluster developers (@bai-cluster)
version_added: 1.0.0
type: aggregate
short_description: Imports the in-process modules once per playbook run
description:
  - Some of this collection's modules run inside the controller's process rather than as
    a module shipped to a host - the session plan and keys always, the session ledger, the
    agent read and the containers when their host is the controller itself (the local
    connection, no become, the controller's own Python). Ansible runs each task in a
    worker process forked from its main process, and what a worker imports is gone with
    it, so each such task imported its module, the collection's code it needs (compiled
    from source by Ansible's collection loader, with no bytecode kept) and the Docker SDK
    anew, up to 0.2 s a task.
  - This callback imports them once, in the main process, before the first play's first
    task, so that every worker (a fork) starts with them imported - those of the playbook's
    tasks (its plays' tasks and those they import; included tasks and roles are not
    looked at), the ledger's, the agent read's and the containers' only when every host
    of the inventory uses the local connection (otherwise they are shipped, and importing
    them here would be wasted).
  - Nothing else changes; a module that cannot be imported is left to the task, which
    reports the error as before.
requirements:
  - enabled in callbacks_enabled (this repository's ansible.cfg does)
"""

import importlib

from ansible_collections.bai.cluster.plugins.plugin_utils.callbacks import RunCallback
from ansible_collections.bai.cluster.plugins.plugin_utils.in_process import MODULES

# The modules of plugins/action/*.py that subclass InProcessAction (always in process)
# and HereFirstAction (in process when their host is this controller).
ALWAYS = ("bai_session_plan", "bai_session_keypair")
HERE_FIRST = ("bai_session_ledger", "bai_agent_info", "bai_session_containers")
LOCAL = ("local", "ansible.builtin.local")


class CallbackModule(RunCallback):
    """Imports the in-process modules at the first play's start (in the main process)."""

    CALLBACK_NAME = "bai.cluster.in_process_imports"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._used: set[str] = set()
        self._done = False

    def v2_playbook_on_start(self, playbook):
        self._used = _used(playbook)
        self._done = False

    def v2_playbook_on_play_start(self, play):
        if self._done:
            return
        self._done = True
        wanted = ALWAYS + (HERE_FIRST if _all_local(play) else ())
        names = [name for name in wanted if name in self._used]
        for name in names:
            try:
                importlib.import_module(MODULES + name)
            except Exception as exc:  # the task reports it, as it would have
                self._display.vvv(f"bai.cluster.in_process_imports: {name}: {exc}")
                return
        if names:
            self._display.vvv(f"bai.cluster.in_process_imports: {', '.join(names)} imported")


def _used(playbook) -> set[str]:
    """The in-process modules that the playbook's tasks name (by their last name part)."""
    ours = set(ALWAYS + HERE_FIRST)
    found: set[str] = set()
    try:
        for play in playbook.get_plays():
            for task in _tasks(play.pre_tasks + play.tasks + play.post_tasks + play.handlers):
                name = str(getattr(task, "action", "") or "").rsplit(".", 1)[-1]
                if name in ours:
                    found.add(name)
    except Exception:  # an odd playbook object: nothing is imported ahead
        return set()
    return found


def _tasks(blocks):
    """The tasks of ``blocks`` (Block objects, nested), rescue and always included."""
    for block in blocks:
        for part in ("block", "rescue", "always"):
            for item in getattr(block, part, None) or []:
                if hasattr(item, "block"):
                    yield from _tasks([item])
                else:
                    yield item


def _all_local(play) -> bool:
    """Whether every host of the inventory uses the local connection (an inventory whose
    variables cannot be read here says no)."""
    try:
        all_vars = play.get_variable_manager().get_vars(play=play)
        hostvars = all_vars["hostvars"]
        return all(
            hostvars[name].get("ansible_connection") in LOCAL
            for name in all_vars["groups"].get("all", [])
        )
    except Exception:  # a template error, an odd inventory: import only what always runs here
        return False
