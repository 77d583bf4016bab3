"""Documentation of the options that say where the session ledger is, shared by the modules
that read or change it (bai_session_ledger, bai_agent_availability, bai_agent_membership).

They are ``STORE_ARGUMENT_SPEC`` in plugins/module_utils/scheduling/ledger/ledger_store.py; a module
whose argument_spec includes it uses ``extends_documentation_fragment: [bai.cluster.ledger_store]``.
Each module documents its own ``lock_timeout`` (what it waits for differs).
"""

from __future__ import annotations


class ModuleDocFragment:
    """The options of ``STORE_ARGUMENT_SPEC``."""

    DOCUMENTATION = r"""
---
options:
  store:
    description:
      - Where the session ledger lives - C(swarm), the raft store of the swarm this host
        manages, or C(file), O(path) on this host.
      - A play gives O(store) and O(path) once to every module that takes them with
        C(module_defaults) for the action group C(group/bai.cluster.ledger).
    type: str
    choices: [file, swarm]
    default: file
  path:
    description:
      - The ledger file on this host (O(store=file)); its directory is created (mode 0700).
    type: path
    default: /var/lib/bai-cluster/ledger.json
"""
