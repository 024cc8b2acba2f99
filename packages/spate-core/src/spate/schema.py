"""A neutral description of the records a deserializer produces, for table DDL.

Owns :class:`Field` and :class:`FieldType`: what a record's fields are, in the terms every
format shares (Avro records, Protobuf messages, JSON Schema objects). Deserializers that
know their schema at start-up describe it through :class:`DescribesRecords`; the
assembly hands the description to sink factories (``BuildContext.record_fields``) so a
sink can create its table from it, and ``spate schema ddl`` prints that DDL. Does not own
any mapping to a database's types: that is the sink's.
"""

from __future__ import annotations

import dataclasses
import enum
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


@runtime_checkable
class DescribesRecords(Protocol):
    """A deserializer that can say, at start-up, which fields its records have."""

    def record_fields(self) -> tuple[Field, ...] | None:
        """The top-level fields of every record, or None when they are not known yet
        (a registry schema not fetched, records of several types)."""
        ...


def record_fields_of(component: object) -> tuple[Field, ...] | None:
    """``component.record_fields()`` when it describes its records, else None."""
    if isinstance(component, DescribesRecords):
        return component.record_fields()
    return None
