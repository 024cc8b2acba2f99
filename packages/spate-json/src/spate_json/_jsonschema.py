"""A JSON Schema as spate's neutral record description (:mod:`spate.schema`), for DDL.

``deserializer: {json: {schema: ...}}`` names a JSON Schema (draft 2020-12 or 7) of the
records; ``spate schema ddl`` and ``create_table: if_missing`` derive the table from it.
Records are not validated against it: the deserializer decodes JSON as without it.

The mapping (what the docs' type table lists):

- ``integer`` → INT64 (``format: int32`` → INT32); ``number`` → FLOAT64
  (``format: float`` → FLOAT32); ``boolean`` → BOOL;
- ``string`` → STRING; with ``format``: ``date-time`` → TIMESTAMP_MICROS, ``date`` →
  DATE, ``uuid`` → UUID; a string ``enum`` → ENUM with its symbols in order;
- ``array`` with ``items`` → ARRAY; ``object`` with ``properties`` → RECORD; an
  ``object`` with only ``additionalProperties: <schema>`` → MAP of string keys;
- ``"type": [T, "null"]``, an ``anyOf``/``oneOf`` of one schema and ``{"type": "null"}``,
  or a property left out of ``required`` → nullable; any other union, or no ``type`` at
  all → JSON (a free-form value);
- local ``$ref`` (``#/$defs/…``, ``#/definitions/…``) is followed; a reference cycle stops
  at the second visit (JSON).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spate.schema import Field, FieldKind, FieldType


class JsonSchemaError(ValueError):
    """A JSON Schema the describer cannot use; the message says where."""


_STRING_FORMATS = {
    "date-time": FieldKind.TIMESTAMP_MICROS,
    "date": FieldKind.DATE,
    "uuid": FieldKind.UUID,
}


def record_fields(schema: Mapping[str, Any]) -> tuple[Field, ...]:
    """The top-level fields of the records ``schema`` describes (an object schema)."""
    described = _Describer(schema).type(schema, "#", ())
    if described.kind is not FieldKind.RECORD:
        raise JsonSchemaError("the schema must describe an object with properties")
    return described.fields


class _Describer:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self._root = root

    def _resolve(self, node: Any, where: str, seen: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        while isinstance(node, Mapping) and "$ref" in node:
            ref = node["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise JsonSchemaError(f"{where}: only local references are supported, got {ref!r}")
            if ref in seen:
                return {}, seen  # a cycle: free-form from here
            seen = (*seen, ref)
            node = self._pointer(ref, where)
        if not isinstance(node, Mapping):
            if node is True or node == {}:
                return {}, seen
            raise JsonSchemaError(f"{where}: expected a schema object, got {node!r}")
        return node, seen

    def _pointer(self, ref: str, where: str) -> Any:
        node: Any = self._root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise JsonSchemaError(f"{where}: reference {ref!r} does not resolve")
            node = node[part]
        return node

    def type(self, node: Any, where: str, seen: tuple[str, ...]) -> FieldType:
        node, seen = self._resolve(node, where, seen)
        for union in ("anyOf", "oneOf"):
            if union in node:
                return self._union(node[union], f"{where}/{union}", seen)
        kinds = node.get("type")
        nullable = False
        if isinstance(kinds, list):
            nullable = "null" in kinds
            kinds = [k for k in kinds if k != "null"]
            if len(kinds) != 1:
                return FieldType(kind=FieldKind.JSON, nullable=nullable)
            kinds = kinds[0]
        symbols = node.get("enum")
        if isinstance(symbols, list) and symbols:
            nullable = nullable or None in symbols
            names = [s for s in symbols if s is not None]
            if all(isinstance(s, str) for s in names) and names:
                return FieldType(kind=FieldKind.ENUM, symbols=tuple(names), nullable=nullable)
        described = self._typed(kinds, node, where, seen)
        return described.with_nullable(nullable) if nullable else described

    def _typed(
        self, kind: Any, node: Mapping[str, Any], where: str, seen: tuple[str, ...]
    ) -> FieldType:
        fmt = node.get("format")
        if kind == "integer":
            return FieldType(kind=FieldKind.INT32 if fmt == "int32" else FieldKind.INT64)
        if kind == "number":
            return FieldType(kind=FieldKind.FLOAT32 if fmt == "float" else FieldKind.FLOAT64)
        if kind == "boolean":
            return FieldType(kind=FieldKind.BOOL)
        if kind == "string":
            return FieldType(kind=_STRING_FORMATS.get(str(fmt), FieldKind.STRING))
        if kind == "array":
            items = node.get("items", {})
            return FieldType(kind=FieldKind.ARRAY, items=self.type(items, f"{where}/items", seen))
        if kind == "object" or (kind is None and "properties" in node):
            properties = node.get("properties")
            if isinstance(properties, Mapping) and properties:
                return FieldType(
                    kind=FieldKind.RECORD,
                    name=str(node.get("title", "")),
                    fields=self._fields(node, properties, where, seen),
                )
            extra = node.get("additionalProperties")
            if isinstance(extra, Mapping) and extra:
                value = self.type(extra, f"{where}/additionalProperties", seen)
                return FieldType(kind=FieldKind.MAP, items=value)
        return FieldType(kind=FieldKind.JSON)

    def _fields(
        self,
        node: Mapping[str, Any],
        properties: Mapping[str, Any],
        where: str,
        seen: tuple[str, ...],
    ) -> tuple[Field, ...]:
        required = set(node.get("required", ()))
        fields = []
        for name, prop in properties.items():
            described = self.type(prop, f"{where}/properties/{name}", seen)
            if name not in required and not described.nullable:
                described = described.with_nullable()
            resolved, _ = self._resolve(prop, where, seen)
            fields.append(
                Field(str(name), described, "default" in resolved, resolved.get("default"))
            )
        return tuple(fields)

    def _union(self, branches: Any, where: str, seen: tuple[str, ...]) -> FieldType:
        if not isinstance(branches, list):
            raise JsonSchemaError(f"{where}: expected a list of schemas")
        resolved = [self._resolve(b, where, seen)[0] for b in branches]
        others = [b for b in resolved if b.get("type") != "null"]
        if len(others) == 1 and len(others) < len(resolved):
            return self.type(others[0], f"{where}/0", seen).with_nullable()
        if len(others) == 1:
            return self.type(others[0], f"{where}/0", seen)
        return FieldType(kind=FieldKind.JSON, nullable=len(others) < len(resolved))
