"""Documentation of a Jinja test's input, shared by the collection's test plugins
(plugins/test/): each tests the one value it is given.
"""

from __future__ import annotations


class ModuleDocFragment:
    """The ``_input`` of a test plugin."""

    DOCUMENTATION = r"""
---
options:
  _input:
    description: The value to test.
    type: raw
    required: true
"""
