"""Lookup ``bai.cluster.bai_request``: what is wrong with the request's extra vars.

It reads the extra vars as Ansible loaded them (``-e``), never rendering one, and names
every request variable's string that Ansible would run as a Jinja template and every
number out of its range (plugins/module_utils/session/request.py and limits.py). The session
playbooks call it first (playbooks/session_manager.yml), so a hostile string is refused
before any task reads it; docs/security.md, "Request input is data".
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: bai_request
author: bai-cluster developers (@bai-cluster)
version_added: 1.0.0
short_description: The problems of a request's extra vars, read without rendering them
description:
  - Reads the extra vars (C(-e)) as Ansible loaded them, never rendering one, and returns
    one message per problem of the request's variables (those named C(session_*),
    C(agent_*), C(show_*), C(logs_*)), an empty list when there is none.
  - A string that Ansible would render as a Jinja template (it holds C({{), C({%) or
    C({#) and is not marked C(!unsafe)) is a problem; give request values with the
    C(!unsafe) tag (C(-e @request.yml)) so that they stay data.
  - A number outside its range (docs/sessions.md) is a problem.
options: {}
notes:
  - Call it with C(wantlist=True).
"""

EXAMPLES = r"""
- name: Check the request's variables (data only, numbers in range)
  ansible.builtin.fail:
    msg: "invalid request: {{ problems | join('; ') }}"
  vars:
    problems: "{{ lookup('bai.cluster.bai_request', wantlist=True) }}"
  when: problems | length > 0
"""

RETURN = r"""
_raw:
  description: One message per problem, naming the variable.
  type: list
  elements: str
"""

from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible.utils.vars import load_extra_vars
from ansible_collections.bai.cluster.plugins.module_utils.session.request import request_problems

try:  # ansible-core 2.19 and later: data tagging
    from ansible.template import is_trusted_as_template as _trusted
except ImportError:  # pragma: no cover - ansible-core 2.18: !unsafe is a type

    def _trusted(value: object) -> bool:
        from ansible.utils.unsafe_proxy import AnsibleUnsafe

        return not isinstance(value, AnsibleUnsafe)


class LookupModule(LookupBase):
    """Ansible entry point."""

    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[str]:
        loader = self._loader
        if loader is None:  # pragma: no cover - Ansible always gives lookups a loader
            raise AnsibleError("bai_request: no data loader, cannot read the extra vars")
        return request_problems(load_extra_vars(loader), _trusted)
