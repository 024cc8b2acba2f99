"""An Avro schema as spate's neutral record description (:mod:`spate.schema`).

Used for table DDL (``create_table``, ``spate schema ddl``) and for deciding whether a
new writer schema only adds fields. Logical types keep their meaning (``timestamp-millis``
→ TIMESTAMP_MILLIS, ``decimal`` with precision and scale, ``uuid``, ``date``); a union
with ``null`` and one other branch is that branch, nullable; any other union is JSON (it
has no single column type). Recursive records stop at the second visit (JSON).
"""

from __future__ import annotations

from typing import Any

from spate.schema import Field, FieldKind, FieldType

from spate_avro._schema import _named_types

_PRIMITIVES = {
    "boolean": FieldKind.BOOL,
    "int": FieldKind.INT32,
    "long": FieldKind.INT64,
    "float": FieldKind.FLOAT32,
    "double": FieldKind.FLOAT64,
    "string": FieldKind.STRING,
    "bytes": FieldKind.BYTES,
}
_LOGICAL = {
    ("int", "date"): FieldKind.DATE,
    ("int", "time-millis"): FieldKind.TIME_MILLIS,
    ("long", "time-micros"): FieldKind.TIME_MICROS,
    ("long", "timestamp-millis"): FieldKind.TIMESTAMP_MILLIS,
    ("long", "timestamp-micros"): FieldKind.TIMESTAMP_MICROS,
    ("long", "local-timestamp-millis"): FieldKind.TIMESTAMP_MILLIS,
    ("long", "local-timestamp-micros"): FieldKind.TIMESTAMP_MICROS,
    ("string", "uuid"): FieldKind.UUID,
}


def record_fields(parsed: Any) -> tuple[Field, ...] | None:
    """The fields of a record schema; None for anything else (a union of records …)."""
    if not isinstance(parsed, dict) or parsed.get("type") not in ("record", "error"):
        return None
    named = _named_types(parsed, {})
    return _Describer(named).record(parsed, ()).fields


def envelope_fields(fields: tuple[Field, ...] | None, envelope: str) -> tuple[Field, ...] | None:
    """The fields describing the table: with ``envelope: debezium`` those of the change
    event's ``after`` record (None when the schema has no such record), else ``fields``."""
    if envelope != "debezium" or fields is None:
        return fields
    for field in fields:
        if field.name == "after" and field.type.kind is FieldKind.RECORD:
            return field.type.fields
    return None


def branch_fields(parsed: Any) -> dict[str, tuple[Field, ...]] | None:
    """The fields of each record of a union of records, by the record's full name; None
    for anything else."""
    if not isinstance(parsed, list):
        return None
    branches = [b for b in parsed if b != "null"]
    if not branches or not all(
        isinstance(b, dict) and b.get("type") in ("record", "error") for b in branches
    ):
        return None
    named = _named_types(parsed, {})
    out: dict[str, tuple[Field, ...]] = {}
    for branch in branches:
        name = str(branch.get("name", ""))
        namespace = branch.get("namespace")
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        out[full] = _Describer(named).record(branch, ()).fields
    return out


class _Describer:
    def __init__(self, named: dict[str, Any]) -> None:
        self._named = named

    def record(self, schema: dict[str, Any], seen: tuple[str, ...]) -> FieldType:
        name = str(schema.get("name", ""))
        fields = []
        for field in schema.get("fields", ()):
            has_default = "default" in field
            fields.append(
                Field(
                    str(field["name"]),
                    self.type(field["type"], (*seen, name)),
                    has_default,
                    field.get("default"),
                    tuple(str(alias) for alias in field.get("aliases") or ()),
                )
            )
        return FieldType(kind=FieldKind.RECORD, name=name, fields=tuple(fields))

    def type(self, schema: Any, seen: tuple[str, ...]) -> FieldType:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return FieldType(kind=_PRIMITIVES[schema])
            if schema == "null":
                return FieldType(kind=FieldKind.JSON, nullable=True)
            if schema in seen:
                return FieldType(kind=FieldKind.JSON, name=schema)
            return self.type(self._named.get(schema, {"type": "null"}), seen)
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null"]
            if len(branches) == 1:
                return self.type(branches[0], seen).with_nullable(len(schema) > 1)
            return FieldType(kind=FieldKind.JSON, nullable="null" in schema)
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if logical == "decimal":
            return FieldType(
                kind=FieldKind.DECIMAL,
                precision=int(schema.get("precision", 0)),
                scale=int(schema.get("scale", 0)),
            )
        if (kind, logical) in _LOGICAL:
            return FieldType(kind=_LOGICAL[(kind, logical)])
        if kind in ("record", "error"):
            if schema.get("name") in seen:
                return FieldType(kind=FieldKind.JSON, name=str(schema.get("name")))
            return self.record(schema, seen)
        if kind == "enum":
            symbols = tuple(schema.get("symbols", ()))
            return FieldType(kind=FieldKind.ENUM, name=str(schema.get("name", "")), symbols=symbols)
        if kind == "fixed":
            return FieldType(kind=FieldKind.BYTES, precision=int(schema.get("size", 0)))
        if kind == "array":
            return FieldType(kind=FieldKind.ARRAY, items=self.type(schema["items"], seen))
        if kind == "map":
            return FieldType(kind=FieldKind.MAP, items=self.type(schema["values"], seen))
        return self.type(kind, seen)
