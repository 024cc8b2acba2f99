"""Metadata columns (``{name: $source}``, ADR 0020): their created and accepted types.

A metadata column holds a piece of each row's record (:class:`~spate.records.MetaSource`)
that the chain adds to the row (B252). This module owns which ClickHouse types such a
column may have — checked at start-up against the table like every other column (B253)
— and the type ``create_table`` gives it (B254). The values themselves are then checked
per column as any row's values are (B95, B28).
"""

from __future__ import annotations

from spate.records import MetaSource

from spate_clickhouse._coerce import INT_RANGES
from spate_clickhouse._types import ChType

CREATED_TYPES: dict[str, str] = {
    "offset": "Int64",
    "partition": "Int32",
    "timestamp": "DateTime64(3, 'UTC')",
    "timestamp_ms": "Int64",
    "topic": "LowCardinality(String)",
    "key": "Nullable(String)",
    "value": "String",
    "header": "Nullable(String)",
}
"""The type ``create_table`` gives a metadata column of each kind (B254)."""

_STRINGS = frozenset({"String", "FixedString"})
_INTS = frozenset(INT_RANGES)
_ACCEPTED: dict[str, frozenset[str]] = {
    "offset": _INTS,
    "partition": _INTS,
    "timestamp_ms": _INTS,
    "timestamp": frozenset({"DateTime", "DateTime64"}),
    "topic": _STRINGS,
    "key": _STRINGS,
    "value": _STRINGS,
    "header": _STRINGS,
}
_MAY_BE_NULL = frozenset({"key", "header"})


def created_type(source: MetaSource) -> str:
    """The type of a created metadata column (B254)."""
    return CREATED_TYPES[source.kind]


def meta_type_problem(name: str, source: MetaSource, actual: ChType) -> str | None:
    """Why column ``name`` of type ``actual`` cannot hold ``source``, or None (B253)."""
    base = actual.unwrapped().name
    accepted = _ACCEPTED[source.kind]
    if base not in accepted:
        return (
            f"column {name} holds {source} but is {actual}; it must be "
            f"{' or '.join(sorted(accepted)) if len(accepted) < 4 else 'an integer type'}"
        )
    if source.kind in _MAY_BE_NULL and not actual.nullable:
        return (
            f"column {name} holds {source}, which is NULL for a record without it, but is "
            f"{actual}; make it Nullable (e.g. {created_type(source)})"
        )
    return None
