"""Ports and port ranges: one reading of them, and the collection's default ranges.

    parse_port(value, field)          a TCP/UDP port 1-65535 from an int or a digit string
    parse_port_range(value, field)    (first, last) from "FIRST-LAST", "FIRST:LAST" or "N"
    parse_port_ranges(value, field)   sorted, distinct ranges from one of those or a list
    range_text((first, last))         "FIRST-LAST" (or "N"), as Docker and nftables write it

Every error is a ``SpecError`` naming the field, what was given and what is allowed.

The defaults are also role variables (roles/cluster_defaults: ``bai_container_port_range``
and ``appproxy_port_range``), the same values (a unit test keeps them equal).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

# Agents publish main1's sshd on a host port from this range (bai_container_port_range).
DEFAULT_CONTAINER_PORT_RANGE = "30000-31000"
# The app proxy's user-facing ports, one per session (appproxy_port_range).
DEFAULT_APPPROXY_PORT_RANGE = "10205-10300"

_PORT = "a port number from 1 to 65535"
_RANGE_RE = re.compile(r"^(\d{1,5})(?:\s*[-:]\s*(\d{1,5}))?$")


def parse_port(value: Any, field_name: str) -> int:
    """A port 1..65535 given as an int or a digit string (env values are strings)."""
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text.isdigit():
        text = int(text)
    if isinstance(text, bool) or not isinstance(text, int) or not 1 <= text <= 65535:
        raise SpecError(f"{field_name}: got {value!r}; expected {_PORT}")
    return text


def parse_port_range(value: Any, field_name: str = "port range") -> tuple[int, int]:
    """(first, last) of "FIRST-LAST" (or "FIRST:LAST", or one port), first <= last."""
    match = None if isinstance(value, bool) else _RANGE_RE.match(str(value).strip())
    if match is None:
        raise SpecError(
            f"{field_name}: got {value!r}; expected FIRST-LAST (e.g. 30000-31000) or one port"
        )
    first, last = int(match.group(1)), int(match.group(2) or match.group(1))
    if not 1 <= first <= last <= 65535:
        raise SpecError(
            f"{field_name}: got {value!r}; the ports must be within 1-65535, the first "
            f"at most the last"
        )
    return first, last


def parse_port_ranges(value: Any, field_name: str = "ports") -> list[tuple[int, int]]:
    """Sorted, distinct (first, last) ranges from one port or range, or a list of those."""
    items = value if isinstance(value, (list, tuple)) else [value]
    ranges = {parse_port_range(item, field_name) for item in items if item not in (None, "")}
    if not ranges:
        raise SpecError(f"{field_name}: got {value!r}; expected at least one port or range")
    return sorted(ranges)


def range_text(port_range: tuple[int, int]) -> str:
    """ "FIRST-LAST", or "N" for a range of one port."""
    first, last = port_range
    return str(first) if first == last else f"{first}-{last}"
