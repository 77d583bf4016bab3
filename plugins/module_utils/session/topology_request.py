"""What a session asks of the cluster's topology: that all its members run inside one
domain of a level (one rack, one block), named by the level (``session_topology``); and,
preferred rather than required (``session_topology_prefer_s``), how long it waits in the
queue for such a domain before it widens to the level above, one level at a time, and
at last to none (:func:`effective_level`).

The levels themselves are the operator's (``bai_topology_levels``, checked by
scheduling/placement/topology.py: check_tree); a request names one of them, and the
playbooks refuse a level the inventory does not have before anything is made. The rule
that keeps the members inside one domain is scheduling/placement/topology.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import parse_count
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import (
    LIMITS,
    check_number,
)

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


def parse_prefer(value: Any, topology: str, field_name: str = "topology_prefer_s") -> int:
    """Seconds to wait for one domain before widening (0: required, never widen), or
    SpecError; only with a topology level."""
    if value is None or value == "" or value == 0:
        return 0
    seconds = parse_count(value, field_name, 0)
    check_number("session_topology_prefer_s", seconds, LIMITS["session_topology_prefer_s"])
    if seconds and not topology:
        raise SpecError(
            f"{field_name}: got {value!r}, but the session names no topology level; give "
            f"session_topology (--topology LEVEL) with it"
        )
    return seconds


def _chain(level: str, levels: Sequence[str]) -> list[str]:
    """``level``, then each level above it in ``levels`` (widest first there), then ""
    (any agents): the levels a preferred session is placed by, one per wait."""
    wider = list(levels[: levels.index(level)]) if level in levels else []
    return [level, *reversed(wider), ""]


def effective_level(level: str, prefer_s: int, waited_s: float, levels: Sequence[str]) -> str:
    """The level a session that asked for ``level`` is placed by after waiting
    ``waited_s`` in the queue: ``level`` itself while ``prefer_s`` is 0 (required) or not
    yet up; then, after each further ``prefer_s``, the level above it in ``levels``
    (widest first), and at last "" (any agents). Never narrower than ``level``."""
    if not level or prefer_s <= 0:
        return level
    chain = _chain(level, levels)
    return chain[min(int(waited_s // prefer_s), len(chain) - 1)]


def widening(
    level: str, prefer_s: int, waited_s: float, levels: Sequence[str]
) -> tuple[str, tuple[str, ...]]:
    """How a session that asked for ``level`` is placed after waiting ``waited_s``: the
    level it must now keep to (:func:`effective_level`), and the narrower levels it asked
    for, narrowest first, whose domains are tried before it (a widened gang still lands
    in one rack when one has room). A session that asks for no level, on a cluster with
    levels, tries the domains of the narrowest first: it is packed into the tightest rack
    that holds it, so whole racks stay free for the gangs that need one."""
    if not level:
        return "", tuple(levels[-1:])
    now = effective_level(level, prefer_s, waited_s, levels)
    if now == level or level not in levels:
        return now, ()
    chain = _chain(level, levels)
    return now, tuple(chain[: chain.index(now)])


def prefer_note(
    level: str, prefer_s: int, submitted_at: float, now: float, levels: Sequence[str]
) -> str:
    """What a queued session that prefers one domain of ``level`` (submitted at
    ``submitted_at``) says of its widening at ``now``: the level it is placed by now,
    and when it widens next, by the ledger's clock (UTC; the same text at every pass
    until it widens). "" when it requires the level, or asks for none."""
    if not level or prefer_s <= 0:
        return ""
    waited = max(now - submitted_at, 0.0)
    current = effective_level(level, prefer_s, waited, levels)
    if not current:
        return f"; it preferred one {level}, and is now placed on any agents"
    steps = int(waited // prefer_s) + 1
    following = effective_level(level, prefer_s, steps * prefer_s, levels)
    when = time.strftime("%H:%M:%S UTC", time.gmtime(submitted_at + steps * prefer_s))
    wider = f"one {following}" if following else "any agents"
    if current == level:
        return f"; it prefers one {level}: it widens to {wider} at {when}"
    return f"; it preferred one {level}, now one {current}: it widens to {wider} at {when}"
