"""Action plugin: generate the session keys inside the controller's process.

bai_session_keypair only ever runs on the controller; as a module it cost a Python start
and an AnsiballZ payload (~0.5 s on a 2 vCPU machine) for a few milliseconds of work.
The keys stay in this process's memory and reach the play as the task's result, exactly
as the module's would; the calling task's ``no_log`` hides them the same way.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.plugin_utils.in_process import InProcessAction


class ActionModule(InProcessAction):
    MODULE = "bai_session_keypair"
