"""A record of the ledger's document: a dataclass read from its JSON object and written
back to the same object, byte for byte.

A record's fields are the keys this toolkit knows; a key it does not know stays in
``extra`` and goes back out as it came. A known key the object does not have stays out
when the record is written again, until its owner sets it (``absent``). A value is kept
as read, never converted on the way in (an ``int`` stays an ``int``), so a document read
and written unchanged is the same text. Nested records (a reservation's kernels) come
from ``NESTED``. A field with ``metadata={"json": False}`` is the record's own (a
cache), never in the document.

    Kernel.from_dict(raw) -> Kernel       Kernel.to_dict() -> the JSON object
    records_of(Kernel)                    the NESTED pair of a list of kernels
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import LedgerError

_R = TypeVar("_R", bound="Record")

# The fields of Record itself, not keys of the document.
_OWN = frozenset({"extra", "absent"})


@dataclass(kw_only=True)
class Record:
    """The base of the ledger's records (module docstring)."""

    # What the record is called in a message about a damaged document.
    KIND: ClassVar[str] = "record"
    # field -> how its JSON value becomes the field's (a nested record), and back.
    NESTED: ClassVar[Mapping[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]] = {}

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    absent: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        # A field set is in the document from now on.
        self.__dict__.get("absent", set()).discard(name)

    @classmethod
    def from_dict(cls: type[_R], data: Any) -> _R:
        """The record of a JSON object; LedgerError when ``data`` is not one."""
        if not isinstance(data, Mapping):
            raise LedgerError(f"the ledger has a {cls.KIND} that is not an object: {data!r:.80}")
        record = cls.__new__(cls)
        values: dict[str, Any] = {"extra": {}, "absent": set()}
        for spec in _fields_of(cls):
            if spec.name in data:
                raw = data[spec.name]
                load = cls.NESTED.get(spec.name)
                values[spec.name] = load[0](raw) if load else raw
            else:
                values[spec.name] = _default(spec)
                values["absent"].add(spec.name)
        known = {spec.name for spec in _fields_of(cls)}
        values["extra"] = {k: v for k, v in data.items() if k not in known}
        for spec in _own_fields_of(cls):
            values[spec.name] = _default(spec)
        record.__dict__.update(values)
        return record

    def drop(self, name: str) -> None:
        """Take field ``name`` out of the document (it reads as its default again)."""
        spec = next(f for f in _fields_of(type(self)) if f.name == name)
        self.__dict__[name] = _default(spec)
        self.absent.add(name)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys it was read with and those set since, and the
        unknown ones as they came."""
        out = dict(self.extra)
        for spec in _fields_of(type(self)):
            if spec.name in self.absent:
                continue
            value = getattr(self, spec.name)
            dump = self.NESTED.get(spec.name)
            out[spec.name] = dump[1](value) if dump else value
        return out


def _fields_of(cls: type[Record]) -> list[Any]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = [
            f for f in fields(cls) if f.name not in _OWN and f.metadata.get("json", True)
        ]
    return found


_FIELDS: dict[type[Record], list[Any]] = {}


def _own_fields_of(cls: type[Record]) -> list[Any]:
    """The fields of a record that are not in the document (``json`` False)."""
    return [f for f in fields(cls) if f.name not in _OWN and not f.metadata.get("json", True)]


def _default(spec: Any) -> Any:
    if spec.default is not MISSING:
        return spec.default
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return None


def records_of(cls: type[_R]) -> tuple[Callable[[Any], list[_R]], Callable[[Any], list[Any]]]:
    """The NESTED pair of a list of ``cls`` records."""

    def load(raw: Any) -> list[_R]:
        if not isinstance(raw, list):
            raise LedgerError(f"the ledger has {cls.KIND}s that are not a list: {raw!r:.80}")
        return [cls.from_dict(item) for item in raw]

    def dump(value: list[_R]) -> list[Any]:
        return [item.to_dict() for item in value]

    return load, dump
