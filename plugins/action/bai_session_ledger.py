"""Action plugin: run bai_session_ledger inside the controller's process when the ledger's
host is the controller itself (the local connection, no become, this Python), else as a
module on that host (plugins/plugin_utils/in_process.py, ``HereFirstAction``).

A create makes two ledger transactions and a destroy two; on an all-in-one inventory
(inventories/local) each saved a Python start and an AnsiballZ payload. The module's
``run()`` is the same code either way, with the same argument spec and results.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.plugin_utils.in_process import HereFirstAction


class ActionModule(HereFirstAction):
    MODULE = "bai_session_ledger"
