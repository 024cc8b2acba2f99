"""The Protobuf deserializers: Confluent framing with a registry, and raw messages.

Owns the per-record path: read the wire prefix, pick the message type (looked up once per
schema id and message-index path, never compiled per record), parse the message with the
protobuf runtime and convert it with the type's generated converter. Every failure
becomes a :class:`~spate.errors.DeserError`, as in spate-avro (B21, B28):

* ``MALFORMED`` — a wrong magic byte, a truncated header or message-index array, bytes
  that are not a valid message of the type, a timestamp out of ``datetime`` range;
* ``SCHEMA_UNAVAILABLE`` — an answer the registry client keeps as permanent (a schema
  that is not Protobuf or does not compile), or an index path the schema lacks;
* ``NOT_READY`` — the registry has not answered yet, or answers 404 for the id (a
  follower that has not caught up): the runtime retries the record;
* ``UNKNOWN_SCHEMA`` — the registry has answered 404 for the id for
  ``unknown_schema_timeout``: the ``on_unknown_schema`` policy applies.

The deserializer never counts: the deserializer stage counts every outcome by policy.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import Any, ClassVar

from google.protobuf.message import DecodeError
from spate import DeserError, DeserErrorKind, ErrorPolicy
from spate.ops import whole_payload
from spate.schema import Field, SchemaChanges
from spate_avro import ConfluentDeserializer, RegistrySettings, SchemaRegistryClient

from spate_protobuf._schema import FileSchema, MessageType, describe

logger = logging.getLogger(__name__)

CONFLUENT_MAGIC = 0
"""First byte of a Confluent-framed payload; then the schema id and the message indexes."""

_schema_id = struct.Struct(">I").unpack_from
_MAX_INDEXES = 64
"""Longest message-index path accepted (nesting deeper than this is not a real schema)."""

DECODE_ERRORS = (DecodeError, ValueError, OverflowError, RecursionError, TypeError)
"""What parsing and converting a bad message may raise (a timestamp out of range raises
``OverflowError``; an unknown enum never raises)."""


def _malformed(exc: BaseException) -> DeserError:
    text = str(exc)
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if len(detail) > 200:
        detail = detail[:200] + "..."
    return DeserError(f"malformed Protobuf payload ({detail})", DeserErrorKind.MALFORMED)


def _varint(data: Any, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``: (value, next position); ``ValueError`` when cut short."""
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("message-index array cut short")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def read_indexes(data: Any, pos: int) -> tuple[tuple[int, ...], int]:
    """Confluent's message-index array at ``pos``: a count, then the indexes.

    A single ``0`` byte stands for ``[0]`` (the first message type of the file).
    """
    count, pos = _varint(data, pos)
    if count == 0:
        return (0,), pos
    if not 0 < count <= _MAX_INDEXES:
        raise ValueError(f"message-index array of {count} entries")
    indexes = []
    for _ in range(count):
        index, pos = _varint(data, pos)
        indexes.append(index)
    return tuple(indexes), pos


class ProtobufDeserializer:
    """Base of both modes: the policy attribute and ``close``."""

    many: ClassVar[bool] = False
    takes_bytes: ClassVar[bool] = True
    """Whole ``bytes`` payloads are parsed as they are, without a view per record (and
    ``deserialize_batch`` reads them as they are, B97)."""

    def __init__(self, on_error: ErrorPolicy, described: tuple[Field, ...] | None = None) -> None:
        self.on_error = on_error
        """The record error policy; the deserializer stage reads it (B28)."""
        self._described = described
        self.columnar: Any = None
        """Truthy when batches can be decoded as columns (``spate[columnar]`` and a message
        type with a columnar form, see ``spate_protobuf._columnar``); None keeps rows."""

    def record_fields(self) -> tuple[Field, ...] | None:
        """The fields of the records, for table DDL (None when not known at start-up)."""
        return self._described

    def deserialize(self, payload: bytes | memoryview) -> object:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release background resources (the registry fetcher). Called at pipeline end."""


class RawProtobufDeserializer(ProtobufDeserializer):
    """``mode: raw`` — each payload is one message of the configured type."""

    def __init__(
        self,
        message_type: MessageType,
        on_error: ErrorPolicy,
        described: tuple[Field, ...] | None = None,
        columnar: Any = None,
    ) -> None:
        super().__init__(on_error, described)
        self._parse = message_type.parse
        self._convert = message_type.convert
        self.message_type = message_type
        self.columnar = columnar
        """A :class:`~spate_protobuf._columnar.ColumnarProtobufDecoder` or None."""

    def deserialize(self, payload: bytes | memoryview) -> object:
        """Decode one payload on the pipeline thread; never blocks."""
        data: Any = payload if type(payload) is bytes else whole_payload(payload)
        if type(data) is not bytes:
            data = data.tobytes()  # a slice: the parser needs bytes
        try:
            return self._convert(self._parse(data))
        except DECODE_ERRORS as exc:
            raise _malformed(exc) from None

    def deserialize_batch(self, payloads: Sequence[bytes | memoryview]) -> Any:
        """The whole batch as columns: ``(frames, errors)`` (see ``spate_protobuf._columnar``)."""
        if self.columnar is None:
            raise RuntimeError(_no_columns(self.message_type))
        if not _all_bytes(payloads):
            payloads = [_whole(p) for p in payloads]
        return self.columnar.decode(payloads)


class ConfluentProtobufDeserializer(ProtobufDeserializer, ConfluentDeserializer):
    """``mode: confluent`` — magic byte 0, a 4-byte schema id, the message indexes, the message.

    Compiled files come from the registry client's cache (its parser compiles them); a
    miss raises ``NOT_READY`` (never a drop, B21) until the id has been unknown to the
    registry for ``unknown_schema_timeout``; then ``UNKNOWN_SCHEMA`` with the
    ``on_unknown_schema`` policy (B28). Each new message type of a schema id is announced
    to the sinks that evolve their tables before its first record is decoded (B60).
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        settings: RegistrySettings,
        *,
        described: tuple[Field, ...] | None = None,
        enums_as_names: bool = True,
        schema_changes: SchemaChanges | None = None,
    ) -> None:
        ProtobufDeserializer.__init__(self, settings.on_error, described)
        ConfluentDeserializer.__init__(self, client, settings, schema_changes)
        self._enums_as_names = enums_as_names
        self._types: dict[bytes, MessageType] = {}
        self._columnar: dict[bytes, Any] = {}

    def deserialize(self, payload: bytes | memoryview) -> object:
        """Decode one payload on the pipeline thread.

        Blocks for at most ``fetch_wait`` on the first record of a schema id not yet cached.
        """
        data: Any = payload if type(payload) is bytes else whole_payload(payload)
        if type(data) is not bytes:
            data = data.tobytes()  # a slice: the parser needs bytes
        if len(data) < 6 or data[0] != CONFLUENT_MAGIC:
            raise self._not_framed(data, "Protobuf", ", a 4-byte schema id and the message indexes")
        key, start = _type_key(data)
        message_type = self._types.get(key)
        if message_type is None:
            message_type = self._type_for(data, start)
            self._types[bytes(key)] = message_type
        try:
            return message_type.convert(message_type.parse(data[start:]))
        except DECODE_ERRORS as exc:
            raise _malformed(exc) from None

    def deserialize_batch(self, payloads: Sequence[bytes | memoryview]) -> Any:
        """The batch as columns, one frame per message type: ``(frames, errors)``.

        Each schema id resolves through the registry as on the row path; an id that is not
        ready stalls the whole batch (``DeserError(NOT_READY)`` is raised, B21). A message
        type with no columnar form raises ``DeserError(SCHEMA_UNAVAILABLE)`` naming why.
        """
        groups: dict[bytes, tuple[int, list[bytes], list[int]]] = {}
        errors: list[tuple[int, DeserError]] = []
        for index, payload in enumerate(payloads):  # whole ``bytes`` or byte views
            data = _whole(payload)
            if len(data) < 6 or data[0] != CONFLUENT_MAGIC:
                errors.append((index, _refusal(self.deserialize, data)))
                continue
            try:
                key, start = _type_key(data)
            except DeserError as exc:
                errors.append((index, exc))
                continue
            group = groups.get(key)
            if group is None:
                group = groups[key] = (start, [], [])
            group[1].append(data[start:])
            group[2].append(index)
        frames: list[tuple[str | None, Any]] = []
        for key, (start, bodies, rows) in groups.items():
            try:
                decoder = self._columnar_for(key, start)
            except DeserError as exc:
                if exc.kind is DeserErrorKind.NOT_READY:
                    raise
                errors.extend((row, exc) for row in rows)
                continue
            if decoder is None:  # not a record error: every record of the type is good
                raise DeserError(
                    f"schema id {_schema_id(key, 0)[0]}: "
                    f"{_no_columns(self._types[key])}; use a row chain",
                    DeserErrorKind.SCHEMA_UNAVAILABLE,
                )
            group_frames, group_errors = decoder.decode(bodies)
            errors.extend((rows[i], exc) for i, exc in group_errors)
            frames.extend(self._in_batch(group_frames, rows))
        errors.sort(key=lambda item: item[0])
        return frames, errors

    def _columnar_for(self, key: bytes, start: int) -> Any:
        """The columnar decoder of one schema id and message-index path (built once); None
        when its message type has no columnar form."""
        decoder = self._columnar.get(key)
        if decoder is not None:
            return decoder
        from spate_protobuf._columnar import ColumnarProtobufDecoder, no_columnar_form

        message_type = self._types.get(key)
        if message_type is None:
            message_type = self._types[bytes(key)] = self._type_for(b"\0" + key, start)
        if no_columnar_form(message_type.descriptor) is not None:
            return None
        decoder = self._columnar[bytes(key)] = ColumnarProtobufDecoder(
            message_type, body_reference(message_type), self._enums_as_names
        )
        return decoder

    def _type_for(self, data: Any, start: int) -> MessageType:
        schema_id: int = _schema_id(data, 1)[0]
        indexes, _ = read_indexes(data, 5)
        schema: FileSchema = self._lookup(schema_id)
        try:
            message_type = schema.by_index(indexes)
        except ValueError as exc:
            raise DeserError(
                f"schema id {schema_id}: {exc}", DeserErrorKind.SCHEMA_UNAVAILABLE
            ) from None
        if self._announcing:
            self._announce(schema_id, describe(message_type.descriptor, self._enums_as_names))
        return message_type

    def close(self) -> None:
        ConfluentDeserializer.close(self)


def _all_bytes(payloads: Sequence[bytes | memoryview]) -> bool:
    """Whether every payload is ``bytes`` (a Kafka batch's values): one C-level pass."""
    return set(map(type, payloads)) <= {bytes}


def _type_key(data: bytes) -> tuple[bytes, int]:
    """A framed payload's message type key (the schema id and the message indexes, as
    bytes) and where the message starts; ``MALFORMED`` when the index array is cut short."""
    if data[5] == 0:  # the common case, one top-level type: a single 0 after the id
        return data[1:6], 6
    try:
        _, start = read_indexes(data, 5)
    except ValueError as exc:
        raise _malformed(exc) from None
    return data[1:start], start


def _whole(payload: bytes | memoryview) -> bytes:
    """A payload as ``bytes`` (the parsers need them; a Kafka batch's values already are)."""
    if type(payload) is bytes:
        return payload
    data: Any = whole_payload(payload)
    return data if type(data) is bytes else bytes(data)


def _refusal(deserialize: Any, data: bytes) -> DeserError:
    """The row path's error for a payload it refuses before any schema lookup."""
    try:
        deserialize(data)
    except DeserError as exc:
        return exc
    raise RuntimeError("the row path accepts a payload with a wrong Confluent header")


def body_reference(message_type: MessageType) -> Any:
    """The row path's decode of one message body (the columnar decoder's reference)."""
    parse, convert = message_type.parse, message_type.convert

    def reference(body: bytes) -> object:
        try:
            return convert(parse(body))
        except DECODE_ERRORS as exc:
            raise _malformed(exc) from None

    return reference


def _no_columns(message_type: MessageType) -> str:
    from spate_protobuf._columnar import columnar_unavailable, no_columnar_form

    missing = columnar_unavailable()
    if missing is not None:
        return missing
    reason = no_columnar_form(message_type.descriptor)
    return (
        f"{message_type.descriptor.full_name} has no columnar form ({reason}): "
        "batches decode as rows"
    )
