"""Jinja test ``bai.cluster.ssh_public_key``: is the value one OpenSSH public key line?

The rule is plugins/module_utils/session/ssh_keys.py's (people's keys are installed in session
containers); session_create.yml checks ``session_authorized_keys`` with it before
anything changes, and bai_session_containers refuses what it refuses.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.session.ssh_keys import is_public_key

DOCUMENTATION = r"""
name: ssh_public_key
author: bai-cluster developers
version_added: 1.0.0
short_description: Test whether a value is one OpenSSH public key line
description:
  - True when the value is C(TYPE BASE64 [COMMENT]) with an OpenSSH key type (ed25519, RSA,
    DSA, ECDSA, or a security-key type), no options prefix and no line break.
extends_documentation_fragment:
  - bai.cluster.test_input
"""

EXAMPLES = r"""
- name: Refuse anything but public key lines
  ansible.builtin.assert:
    that: keys | reject('bai.cluster.ssh_public_key') | list | length == 0
"""

RETURN = r"""
_value:
  description: Whether the value is one OpenSSH public key line.
  type: bool
"""


class TestModule:
    """Ansible entry point."""

    def tests(self) -> dict[str, Any]:
        return {"ssh_public_key": is_public_key}
