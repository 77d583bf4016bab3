"""Reading user values: memory sizes, CPUs, counts and resource mappings (ports: ports.py).

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
from ansible_collections.bai.cluster.plugins.module_utils.session.model import Resources, format_mem

# Docker refuses memory limits below 6 MiB; say so before Docker does.
MIN_MEM = 6 * 1024**2
_DIGITS_RE = re.compile(r"^[0-9]+$")
# Docker's own grammar (go-units RAMInBytes): number, optional unit, optional i and b.
_MEM_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?) ?(?:([kmgtp])i?b?|b)?$", re.IGNORECASE)
_MEM_UNITS = {None: 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_MEM_UNITS["p"] = 1024**5
RESOURCE_KEYS = ("cpu", "mem", "gpu", "shm")
# The smallest /dev/shm worth asking for.
MIN_SHM = 1024**2


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


def parse_resources(
    raw: Mapping[str, Any] | None,
    default: Resources | None = None,
    field_name: str = "resources",
) -> Resources:
    """Resources of one container. Keys missing from ``raw`` come from ``default``
    (cpu 1, mem 1g, gpu 0 when no default is given), so a role can override only what
    differs from the session level."""
    base = default or Resources(1.0, 1024**3, 0)
    if raw is None:
        return base
    raw = require_mapping(raw, field_name)
    reject_unknown(raw, RESOURCE_KEYS, field_name)
    given = {key: value for key, value in raw.items() if value is not None}
    cpu = parse_cpu(given["cpu"], f"{field_name}.cpu") if "cpu" in given else base.cpu
    mem = parse_mem(given["mem"], f"{field_name}.mem") if "mem" in given else base.mem
    if mem < MIN_MEM:
        raise SpecError(
            f"{field_name}.mem: got {format_mem(mem)} ({mem} bytes); Docker needs at "
            f"least 6m per container"
        )
    gpu = base.gpu
    if "gpu" in given:
        gpu = parse_count(given["gpu"], f"{field_name}.gpu", minimum=0)
    shm = parse_mem(given["shm"], f"{field_name}.shm") if "shm" in given else base.shm
    if shm is not None and not MIN_SHM <= shm <= mem:
        raise SpecError(
            f"{field_name}.shm: got {format_mem(shm)} ({shm} bytes); /dev/shm is part of "
            f"the container's memory, so it must lie between 1m and mem ({format_mem(mem)})"
        )
    return Resources(cpu, mem, gpu, shm)
