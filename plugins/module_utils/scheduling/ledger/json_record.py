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
    record_of(AgentState)                 the NESTED pair of one record
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
        absent = self.__dict__.get("absent")
        if absent:
            absent.discard(name)

    @classmethod
    def from_dict(cls: type[_R], data: Any) -> _R:
        """The record of a JSON object; LedgerError when ``data`` is not one."""
        if not isinstance(data, (dict, Mapping)):
            raise LedgerError(f"the ledger has a {cls.KIND} that is not an object: {data!r:.80}")
        shape = _shape_of(cls)
        record = cls.__new__(cls)
        values = record.__dict__
        values.update(shape.constants)
        for name, factory in shape.factories:
            values[name] = factory()
        known = shape.known
        extra = {}
        if known.issuperset(data):  # the usual case, in C
            values.update(data)
        else:
            for key, raw in data.items():
                if key in known:
                    values[key] = raw
                else:
                    extra[key] = raw
        for name, load in shape.loads:
            if name in data:
                values[name] = load(data[name])
        values["extra"] = extra
        values["absent"] = set(known.difference(data))
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
        values, absent = self.__dict__, self.absent
        for name, dump in _shape_of(type(self)).dumps:
            if name not in absent:
                out[name] = dump(values[name]) if dump else values[name]
        return out


def _fields_of(cls: type[Record]) -> list[Any]:
    return _shape_of(cls).specs


@dataclass(frozen=True)
class _Shape:
    """What from_dict and to_dict need of a record class, worked out once per class."""

    specs: list[Any]  # the document's fields (dataclasses.Field), in order
    known: frozenset[str]  # their names
    constants: dict[str, Any]  # field -> its immutable default (the record's own fields too)
    factories: tuple[tuple[str, Callable[[], Any]], ...]  # field -> its default_factory
    loads: tuple[tuple[str, Callable[[Any], Any]], ...]  # nested field -> its loader
    dumps: tuple[tuple[str, Callable[[Any], Any] | None], ...]  # field -> its dumper or None


_SHAPES: dict[type[Record], _Shape] = {}


def _shape_of(cls: type[Record]) -> _Shape:
    found = _SHAPES.get(cls)
    if found is None:
        mine = [f for f in fields(cls) if f.name not in _OWN]
        specs = [f for f in mine if f.metadata.get("json", True)]
        nested = cls.NESTED
        found = _SHAPES[cls] = _Shape(
            specs=specs,
            known=frozenset(f.name for f in specs),
            constants={
                f.name: None if f.default is MISSING else f.default
                for f in mine
                if f.default_factory is MISSING
            },
            factories=tuple(
                (f.name, f.default_factory) for f in mine if f.default_factory is not MISSING
            ),
            loads=tuple((f.name, nested[f.name][0]) for f in specs if f.name in nested),
            dumps=tuple((f.name, nested[f.name][1] if f.name in nested else None) for f in specs),
        )
    return found


def _default(spec: Any) -> Any:
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return None if spec.default is MISSING else spec.default


def record_of(cls: type[_R]) -> tuple[Callable[[Any], _R], Callable[[Any], Any]]:
    """The NESTED pair of one ``cls`` record."""
    return cls.from_dict, lambda value: value.to_dict()


def records_of(cls: type[_R]) -> tuple[Callable[[Any], list[_R]], Callable[[Any], list[Any]]]:
    """The NESTED pair of a list of ``cls`` records."""

    def load(raw: Any) -> list[_R]:
        if not isinstance(raw, list):
            raise LedgerError(f"the ledger has {cls.KIND}s that are not a list: {raw!r:.80}")
        return [cls.from_dict(item) for item in raw]

    def dump(value: list[_R]) -> list[Any]:
        return [item.to_dict() for item in value]

    return load, dump
