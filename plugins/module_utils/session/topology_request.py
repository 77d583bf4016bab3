"""What a session asks of the cluster's topology: that all its members run inside one
domain of a level (one rack, one block), named by the level (``session_topology``).

The levels themselves are the operator's (``bai_topology_levels``, checked by
scheduling/placement/topology.py: check_tree); a request names one of them, and the
playbooks refuse a level the inventory does not have before anything is made. The rule
that keeps the members inside one domain is scheduling/placement/topology.py.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

# A level's name: what a label key, a CLI word and a metric label all allow.
LEVEL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
LEVEL_RULE = "lowercase letters, digits and _, starting with a letter, at most 32"


def parse_topology(value: Any, field_name: str = "topology") -> str:
    """The level a session asks to be kept inside ("" for none), or SpecError."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not LEVEL_NAME.match(value):
        raise SpecError(
            f"{field_name}: got {value!r}; a topology level is a name of the inventory's "
            f"bai_topology_levels (e.g. rack), {LEVEL_RULE}"
        )
    return value


def check_known(level: str, levels: list[str]) -> None:
    """SpecError unless ``level`` ("" for none) is one of the cluster's ``levels``
    (``bai_topology_levels``)."""
    if not level or level in levels:
        return
    if not levels:
        raise SpecError(
            f"topology: got {level!r}, but this cluster has no topology levels "
            f"(bai_topology_levels is empty); leave session_topology out"
        )
    raise SpecError(
        f"topology: got {level!r}; this cluster's levels are {', '.join(levels)} "
        f"(bai_topology_levels, widest first)"
    )
