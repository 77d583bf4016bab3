"""Action plugin: run bai_session_containers inside the controller's process when the
agent is the controller itself (the local connection, no become, this Python) and the task
is not async (a one-agent create, a destroy), else as a module on the agent, async or not
(plugins/plugin_utils/in_process.py, ``HereFirstAction``).
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.plugin_utils.in_process import HereFirstAction


class ActionModule(HereFirstAction):
    MODULE = "bai_session_containers"
