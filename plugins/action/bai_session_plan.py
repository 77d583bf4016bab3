"""Action plugin: run bai_session_plan inside the controller's process.

The module is pure logic over the data the play hands it, and session_create.yml runs it
on the controller once per run (its first task, "Check the session request"). Shipped as
a module it costs a Python start and an AnsiballZ payload (~0.35 s on a 2 vCPU machine);
here ``InProcessAction`` (plugins/plugin_utils/in_process.py) calls the same ``run()`` of
plugins/modules/bai_session_plan.py directly, with the same argument spec and the same
results.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.plugin_utils.in_process import InProcessAction


class ActionModule(InProcessAction):
    MODULE = "bai_session_plan"
