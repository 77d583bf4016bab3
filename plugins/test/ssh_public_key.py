"""Jinja test ``bai.cluster.ssh_public_key``: is the value one OpenSSH public key line?

The rule is plugins/module_utils/appproxy.py's ``PUBLIC_KEY_RE`` (people's keys are
installed in session containers and routed through the app proxy); session_create.yml
checks ``session_authorized_keys`` with it before anything changes.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.appproxy import PUBLIC_KEY_RE

DOCUMENTATION = r"""
name: ssh_public_key
author: bai-cluster developers
version_added: 1.0.0
short_description: Test whether a value is one OpenSSH public key line
description:
  - True when the value is C(TYPE BASE64 [COMMENT]) with an OpenSSH key type (ed25519, RSA,
    DSA, ECDSA, or a security-key type), no options prefix and no line break.
options:
  _input:
    description: The value to test.
    type: raw
    required: true
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


def is_public_key(value: Any) -> bool:
    """True when ``value`` is a string holding one public key line."""
    return isinstance(value, str) and PUBLIC_KEY_RE.match(value.strip()) is not None


class TestModule:
    """Ansible entry point."""

    def tests(self) -> dict[str, Any]:
        return {"ssh_public_key": is_public_key}
