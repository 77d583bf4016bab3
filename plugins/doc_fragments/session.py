"""Documentation of the options that name a session, shared by the modules that make or
remove something of one session (its containers, its network, its app proxy route).

They are ``SESSION_ARGUMENT_SPEC`` in plugins/module_utils/common/labels.py; a module whose
argument_spec includes it uses ``extends_documentation_fragment: [bai.cluster.session]``
and says in its description what it makes and removes.
"""

from __future__ import annotations


class ModuleDocFragment:
    """The options of ``SESSION_ARGUMENT_SPEC``."""

    DOCUMENTATION = r"""
---
options:
  state:
    description:
      - Whether what the module manages for the session (its containers on this agent, its
        network, its app proxy route) should exist.
    type: str
    choices: [present, absent]
    default: present
  session:
    description:
      - The session name (the C(ai.backend.cluster.session) label of what the session owns).
    type: str
    required: true
  session_id:
    description:
      - The session id (main1's kernel id, the C(ai.backend.cluster.session-id) label).
        Required with O(state=present) by the modules that make something of it.
    type: str
"""
