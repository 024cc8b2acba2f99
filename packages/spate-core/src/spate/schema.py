"""A neutral description of the records a deserializer produces, for table DDL.

Owns :class:`Field` and :class:`FieldType`: what a record's fields are, in the terms every
format shares (Avro records, Protobuf messages, JSON Schema objects). Deserializers that
know their schema at start-up describe it through :class:`DescribesRecords`; the
assembly hands the description to sink factories (``BuildContext.record_fields``) so a
sink can create its table from it, and ``spate schema ddl`` prints that DDL. Does not own
any mapping to a database's types: that is the sink's.

:class:`SchemaChanges` carries the writer schemas a deserializer meets while it runs (a new
registry id) to the sinks that evolve their tables from them (``evolve: add_columns``):
the deserializer publishes a schema's fields before it decodes the first record written
with it, a listener that cannot take the schema raises, and the deserializer then reports
the record not ready (B21), so no row of that schema reaches a sink first.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class FieldKind(enum.Enum):
    """What a field holds, independent of the wire format."""

    BOOL = "bool"
    INT32 = "int32"
    INT64 = "int64"
    UINT32 = "uint32"
    UINT64 = "uint64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    STRING = "string"
    BYTES = "bytes"
    ENUM = "enum"
    DATE = "date"
    TIME_MILLIS = "time_millis"
    TIME_MICROS = "time_micros"
    TIMESTAMP_MILLIS = "timestamp_millis"
    TIMESTAMP_MICROS = "timestamp_micros"
    DURATION = "duration"
    UUID = "uuid"
    DECIMAL = "decimal"
    ARRAY = "array"
    MAP = "map"
    RECORD = "record"
    JSON = "json"
    """A free-form value (a Protobuf ``Struct``, a JSON Schema without a type)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldType:
    """A field's type: its kind and what the kind needs (symbols, items, fields …)."""

    kind: FieldKind
    nullable: bool = False
    """The value may be missing (an Avro union with null, a Protobuf field with presence)."""
    name: str = ""
    """The full name of a record or enum type."""
    precision: int = 0
    scale: int = 0
    symbols: tuple[str, ...] = ()
    """Enum symbols in order (their numbers, when known, are ``numbers``)."""
    numbers: tuple[int, ...] = ()
    items: FieldType | None = None
    """The element type of an ARRAY, the value type of a MAP (keys are strings)."""
    fields: tuple[Field, ...] = ()
    """The fields of a RECORD."""

    def with_nullable(self, nullable: bool = True) -> FieldType:
        return dataclasses.replace(self, nullable=nullable)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a record: name, type and, when the schema gives one, its default."""

    name: str
    type: FieldType
    has_default: bool = False
    default: object = None
    aliases: tuple[str, ...] = ()
    """Names the field had before (an Avro field's ``aliases``): it was renamed."""


@runtime_checkable
class DescribesRecords(Protocol):
    """A deserializer that can say, at start-up, which fields its records have."""

    def record_fields(self) -> tuple[Field, ...] | None:
        """The top-level fields of every record, or None when they are not known yet
        (a registry schema not fetched, records of several types)."""
        ...


@runtime_checkable
class DescribesBranches(Protocol):
    """A deserializer whose records are of several types (a union of Avro records): it
    describes each type, so a sink that takes one of them can still be described."""

    def branch_fields(self) -> Mapping[str, tuple[Field, ...]] | None:
        """The top-level fields of each record type by its name, or None when the records
        are not a union of known record types."""
        ...


def branch_fields_of(component: object) -> Mapping[str, tuple[Field, ...]] | None:
    """``component.branch_fields()`` when it describes its record types, else None."""
    if isinstance(component, DescribesBranches):
        return component.branch_fields()
    return None


def record_fields_of(component: object) -> tuple[Field, ...] | None:
    """``component.record_fields()`` when it describes its records, else None."""
    if isinstance(component, DescribesRecords):
        return component.record_fields()
    return None


SchemaListener = Callable[[str, tuple[Field, ...]], None]
"""Called with a schema's name for messages (``schema id 7``) and its top-level fields."""


class SchemaChanges:
    """One pipeline's channel from its deserializer to the sinks that follow its schemas.

    Sinks :meth:`subscribe` at build time; the deserializer :meth:`publish` es each new
    writer schema on the pipeline thread, before it decodes a record written with it.
    """

    def __init__(self) -> None:
        self._listeners: list[SchemaListener] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: SchemaListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    @property
    def watched(self) -> bool:
        """Whether any sink listens (a deserializer skips describing schemas otherwise)."""
        return bool(self._listeners)

    def publish(self, schema: str, fields: tuple[Field, ...]) -> None:
        """Tell every listener; the first that refuses the schema raises (its message is
        the one line the deserializer reports)."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(schema, fields)
