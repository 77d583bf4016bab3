"""Action plugin: run bai_agent_info inside the controller's process when the agent is the
controller itself (the local connection, no become, this Python), else as a module on the
agent (plugins/plugin_utils/in_process.py, ``HereFirstAction``).

Every create reads the agents it places on; on an all-in-one inventory (inventories/local)
that read saved a Python start and an AnsiballZ payload. The module's ``run()`` is the same
code either way, with the same argument spec and results.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.plugin_utils.in_process import HereFirstAction


class ActionModule(HereFirstAction):
    MODULE = "bai_agent_info"
