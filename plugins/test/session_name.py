"""Jinja test ``bai.cluster.session_name``: is the value a valid session name?

The rule itself is plugins/module_utils/session/naming.py's; the session playbooks check a name
with it before they touch any agent, e.g. ``session_name is bai.cluster.session_name``.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.session.naming import is_session_name

DOCUMENTATION = r"""
name: session_name
author: bai-cluster developers
version_added: 1.0.0
short_description: Test whether a value is a valid session name
description:
  - True when the value is 1-32 characters of lowercase letters, digits and C(-), starting
    and ending with a letter or digit, the rule every session name follows (it becomes
    part of container and network names).
extends_documentation_fragment:
  - bai.cluster.test_input
"""

EXAMPLES = r"""
- name: Refuse a bad session name before anything is changed
  ansible.builtin.assert:
    that: session_name is bai.cluster.session_name
"""

RETURN = r"""
_value:
  description: Whether the value is a valid session name.
  type: bool
"""


class TestModule:
    """Ansible entry point."""

    def tests(self) -> dict[str, Any]:
        return {"session_name": is_session_name}
