"""Documentation of the attributes the bai.cluster modules share.

Every module uses ``extends_documentation_fragment: [bai.cluster.attributes]``: it is in
the ``cluster`` action group of meta/runtime.yml. A module that changes nothing adds
``bai.cluster.attributes.read_only`` (check mode, diff mode, idempotence); a module that
says more about one of these keeps that attribute's ``description`` in its own
``attributes:``, which wins over the fragment's.
"""

from __future__ import annotations


class ModuleDocFragment:
    """The attributes of every module, and those of a module that changes nothing."""

    DOCUMENTATION = r"""
---
options: {}
attributes:
  action_group:
    description:
      Use C(group/bai.cluster.cluster) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - bai.cluster.cluster
"""

    READ_ONLY = r"""
---
options: {}
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is no diff to show.
  idempotent:
    support: full
    description: Never changes anything.
"""
