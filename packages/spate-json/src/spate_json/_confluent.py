"""``mode: confluent``: the JSON that Confluent's ``JSONSerializer`` writes, with its schema.

Owns the per-record path of Confluent-framed JSON: the 5-byte header (magic byte 0, a
big-endian 4-byte schema id; JSON has no message indexes), the writer's JSON Schema
looked up by id through spate-avro's registry client (one client and one set of rules
for Avro, Protobuf and JSON), the optional validation of each record against that schema,
and the columnar batch (the headers stripped, the bodies read by the plain ``single``
columnar decoder). Upholds:

* B300 — a payload is decoded as ``orjson`` decodes the JSON text after the header;
  a wrong magic byte, a cut header or a body that is not JSON is ``MALFORMED``;
* B301 — a schema id not in the cache is ``NOT_READY`` (the record waits, never dropped,
  B21) until the registry has answered 404 for ``unknown_schema_timeout``, then
  ``UNKNOWN_SCHEMA`` under ``on_unknown_schema`` (B30); an answer that is not a usable
  JSON Schema is ``SCHEMA_UNAVAILABLE``, a record error;
* B302 — with ``validate: true``, a record its schema refuses is a record error
  (``MALFORMED``, naming the schema id, the failing path and the reason);
* B303 — each new schema id is announced to the sinks that evolve their tables before
  its first record is decoded (B60, B61), with the fields the JSON Schema describes;
* B304 — the columnar path stores what the row path stores, record for record.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson
from spate import DeserError, DeserErrorKind
from spate.ops import whole_payload
from spate.schema import Field, SchemaChanges
from spate_avro import ConfluentDeserializer, RegistrySettings, SchemaRegistryClient

from spate_json._deserializer import JsonDeserializer, _invalid, _wrong_type
from spate_json._jsonschema import JsonSchemaError, record_fields

CONFLUENT_MAGIC = 0
"""First byte of a Confluent-framed payload; the schema id follows, then the JSON."""

_HEADER = 5
_schema_id = struct.Struct(">I").unpack_from
_DecodeError = orjson.JSONDecodeError
_loads = orjson.loads

Check = Callable[[object], str | None]
"""A compiled JSON Schema check: None when the value matches, else why not."""


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """One registry JSON Schema, parsed once per schema id by the registry client."""

    schema: dict[str, Any]
    fields: tuple[Field, ...] | None
    """The record fields it describes (None: not an object schema, nothing to announce)."""
    check: Check | None
    """Its compiled validator (``validate: true``), else None."""


class RegistryJsonSchemas:
    """The registry client's parser: a ``schemaType: JSON`` answer → a :class:`WriterSchema`.

    A ``ValueError`` makes the answer permanent (negatively cached, ``SCHEMA_UNAVAILABLE``):
    another schema type, schema references, text that is not a JSON Schema object, or
    (with ``validate``) a schema the validator refuses.
    """

    def __init__(self, validate: bool) -> None:
        self._validate = validate

    def __call__(
        self, client: SchemaRegistryClient, schema_id: int, answer: dict[str, Any]
    ) -> WriterSchema:
        kind = answer.get("schemaType", "AVRO")
        if kind != "JSON":
            raise ValueError(f"a {kind} schema, not JSON")
        if answer.get("references"):
            raise ValueError("uses schema references, which are not supported for JSON")
        try:
            schema = json.loads(str(answer["schema"]))
        except ValueError as exc:
            raise ValueError(f"schema text is not JSON: {exc}") from None
        if not isinstance(schema, dict):
            raise ValueError("a JSON Schema must be a JSON object")
        try:
            fields: tuple[Field, ...] | None = record_fields(schema)
        except JsonSchemaError:
            fields = None  # decodable, but it describes no table
        return WriterSchema(schema, fields, compile_check(schema) if self._validate else None)


def compile_check(schema: dict[str, Any]) -> Check:
    """The validator of ``schema`` (its ``$schema`` draft, else draft 7 as Confluent's
    serializer assumes); ``ValueError`` when the schema itself is invalid. Formats are
    annotations, as in the serializer's own validation."""
    from jsonschema import exceptions, validators

    cls = validators.validator_for(schema, default=validators.Draft7Validator)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
    validator = cls(schema)
    is_valid = validator.is_valid

    def check(value: Any) -> str | None:
        if is_valid(value):
            return None
        error = exceptions.best_match(validator.iter_errors(value))
        if error is None:  # pragma: no cover - is_valid and iter_errors agree
            return "does not match its JSON Schema"
        where = "/".join(map(str, error.absolute_path)) or "(the record)"
        message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
        return f"does not match its JSON Schema at {where}: {message}"

    return check


class ConfluentJsonDeserializer(JsonDeserializer, ConfluentDeserializer):
    """``mode: confluent`` — magic byte 0, a 4-byte schema id, the JSON text (B300-B304).

    Schemas come from the registry client's cache; a miss raises ``NOT_READY`` (B21)
    until the id has been unknown for ``unknown_schema_timeout`` (then
    ``UNKNOWN_SCHEMA``, B30). Each new schema id is announced to the sinks that evolve
    their tables before its first record is decoded (B60).
    """

    many: ClassVar[bool] = False
    takes_bytes: ClassVar[bool] = True
    """orjson reads whole ``bytes`` payloads as they are, without a view per record."""

    def __init__(
        self,
        client: SchemaRegistryClient,
        settings: RegistrySettings,
        *,
        objects_only: bool,
        described: tuple[Field, ...] | None = None,
        schema_changes: SchemaChanges | None = None,
    ) -> None:
        JsonDeserializer.__init__(
            self, on_error=settings.on_error, objects_only=objects_only, convert=None
        )
        ConfluentDeserializer.__init__(self, client, settings, schema_changes)
        self.described = described
        self._schemas: dict[int, WriterSchema] = {}

    def deserialize(self, payload: bytes | memoryview) -> object:
        """Decode one payload on the pipeline thread.

        Blocks for at most ``fetch_wait`` on the first record of a schema id not cached.
        """
        data: Any = payload if type(payload) is bytes else whole_payload(payload)
        schema_id = _header(data)
        schema = self._schemas.get(schema_id) or self._schema_for(schema_id)
        value = self._body(data[_HEADER:])
        check = schema.check
        if check is not None:
            problem = check(value)
            if problem is not None:
                raise DeserError(f"schema id {schema_id}: {problem}", DeserErrorKind.MALFORMED)
        return value

    def reference(self, payload: bytes | memoryview) -> list[object]:
        try:
            return [self.deserialize(payload)]
        except DeserError as exc:
            return [exc]

    def deserialize_batch(self, payloads: Sequence[bytes | memoryview]) -> Any:
        """The whole batch as columns: ``(frames, errors, empty)`` (B304).

        Each payload's header is read and its schema id resolved as on the row path; an
        id that is not ready stalls the whole batch (``DeserError(NOT_READY)`` is
        raised, B21). With ``validate``, each record is checked as on the row path
        before the bodies are read as columns by the plain ``single`` decoder.
        """
        if self.columnar is None:
            return JsonDeserializer.deserialize_batch(self, payloads)
        errors: list[tuple[int, DeserError]] = []
        bodies: list[bytes] = []
        rows: list[int] = []
        for index, payload in enumerate(payloads):
            data: Any = payload if type(payload) is bytes else whole_payload(payload)
            try:
                schema_id = _header(data)
                schema = self._schemas.get(schema_id) or self._schema_for(schema_id)
                if schema.check is not None:
                    self.deserialize(data)  # the row path's refusal, if any
            except DeserError as exc:
                if exc.kind is DeserErrorKind.NOT_READY:
                    raise
                errors.append((index, exc))
                continue
            bodies.append(bytes(data[_HEADER:]))
            rows.append(index)
        frames, body_errors, empty = self.columnar.decode(bodies)
        errors.extend((rows[i], exc) for i, exc in body_errors)
        errors.sort(key=lambda item: item[0])
        return self._in_batch(frames, rows), errors, empty

    def body_reference(self, body: bytes | memoryview) -> list[object]:
        """The row path's decoding of one body after its header (the columnar decoder's
        reference): the record, or the ``DeserError`` the row path raises for it."""
        try:
            return [self._body(body)]
        except DeserError as exc:
            return [exc]

    def _body(self, body: Any) -> object:
        try:
            value = _loads(body)
        except _DecodeError as exc:
            raise _invalid(exc) from None
        if self._objects_only and type(value) is not dict:
            raise _wrong_type(value)
        return value

    def _schema_for(self, schema_id: int) -> WriterSchema:
        """The writer schema of ``schema_id`` from the registry (cached once fetched),
        announced to the evolving sinks first (B303)."""
        schema: WriterSchema = self._lookup(schema_id)
        if self._announcing:
            self._announce(schema_id, schema.fields)
        self._schemas[schema_id] = schema
        return schema

    def close(self) -> None:
        ConfluentDeserializer.close(self)


def _header(data: Any) -> int:
    """The schema id of a Confluent-framed payload; ``MALFORMED`` when the header is bad."""
    if len(data) < _HEADER or data[0] != CONFLUENT_MAGIC:
        raise ConfluentDeserializer._not_framed(
            data, "JSON", ", a 4-byte schema id and the JSON text"
        )
    schema_id: int = _schema_id(data, 1)[0]
    return schema_id
