"""Reading user values: memory sizes, CPUs, counts, mappings and lists (ports: ports.py;
a container's resources: session/resources.py).

Every value a person can get wrong raises ``SpecError`` whose message names the field,
shows what was given and says what is allowed. Docker's own grammar is followed where
Docker defines one (memory sizes: go-units RAMInBytes, 1024-based).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

_DIGITS_RE = re.compile(r"^[0-9]+$")
# Docker's own grammar (go-units RAMInBytes): number, optional unit, optional i and b.
_MEM_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?) ?(?:([kmgtp])i?b?|b)?$", re.IGNORECASE)
_MEM_UNITS = {None: 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_MEM_UNITS["p"] = 1024**5


def type_name(value: Any) -> str:
    """The type of ``value`` as messages show it, e.g. ``int``."""
    return type(value).__name__


def parse_mem(value: Any, field_name: str = "mem") -> int:
    """Parse a memory size into bytes, with Docker's semantics (all units 1024-based).

    Accepts an int (bytes) or a string: ``"100"`` (bytes), ``"2048k"``, ``"512m"``,
    ``"1g"``, ``"1.5G"``, ``"512Mi"``, ``"1GiB"``, ``"1gb"``. Booleans are rejected
    because YAML turns ``yes`` into ``True``, which is never meant as one byte.
    """
    allowed = "an integer number of bytes or a string like '512m', '1g', '1.5G', '1Gi'"
    if isinstance(value, bool):
        raise SpecError(f"{field_name}: got boolean {value!r}; expected {allowed}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        nbytes = value
    elif isinstance(value, str):
        nbytes = _parse_mem_string(value.strip(), field_name, allowed)
    else:
        raise SpecError(f"{field_name}: got {type_name(value)} {value!r}; expected {allowed}")
    if nbytes <= 0:
        raise SpecError(f"{field_name}: got {value!r}; memory must be more than 0 bytes")
    return nbytes


def _parse_mem_string(text: str, field_name: str, allowed: str) -> int:
    match = _MEM_RE.match(text)
    if match is None:
        raise SpecError(f"{field_name}: cannot read {text!r} as a size; expected {allowed}")
    number, unit = match.group(1), match.group(2)
    factor = _MEM_UNITS[unit.lower() if unit else None]
    try:
        return int(Decimal(number) * factor)
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise SpecError(f"{field_name}: cannot read {text!r}; expected {allowed}") from None


def parse_cpu(value: Any, field_name: str) -> float:
    """CPUs as a positive number, kept to 3 decimals (Docker's ``--cpus`` precision)."""
    allowed = "a number of CPUs greater than 0, e.g. 1, 0.5 or 2.25"
    if isinstance(value, bool):
        raise SpecError(f"{field_name}: got boolean {value!r}; expected {allowed}")
    number: float
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise SpecError(f"{field_name}: got {value!r}; expected {allowed}") from None
    else:
        raise SpecError(f"{field_name}: got {type_name(value)} {value!r}; expected {allowed}")
    if not math.isfinite(number) or round(number, 3) <= 0:
        raise SpecError(f"{field_name}: got {value!r}; expected {allowed}")
    return round(number, 3)


def parse_count(value: Any, field_name: str, minimum: int) -> int:
    """A whole number >= ``minimum``; digit strings are accepted because ``-e k=v``
    on the ansible-playbook command line always yields strings."""
    allowed = f"a whole number >= {minimum}"
    if isinstance(value, bool):
        raise SpecError(f"{field_name}: got boolean {value!r}; expected {allowed}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and _DIGITS_RE.match(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int):
        raise SpecError(f"{field_name}: got {type_name(value)} {value!r}; expected {allowed}")
    if value < minimum:
        raise SpecError(f"{field_name}: got {value}; expected {allowed}")
    return value


def reject_unknown(raw: Mapping[str, Any], known: Sequence[str], where: str) -> None:
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        raise SpecError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(known)}"
        )


def require_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}: expected a mapping (dict), got {type_name(value)} {value!r}")
    return value


def require_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{where}: expected a list, got {type_name(value)} {value!r}")
    return list(value)
