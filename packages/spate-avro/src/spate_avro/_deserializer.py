"""The Avro deserializers for the three wire modes: raw, single-object and Confluent.

Owns the per-record path: take the payload (``view.obj`` when the view spans a whole
``bytes`` object, so nothing is copied), check the wire prefix, pick the decode function
for the writer schema (built once per schema, never per record) and turn every decoding
failure into a :class:`~spate.errors.DeserError`:

* ``MALFORMED`` — truncated data, a wrong magic byte or marker, trailing bytes, an
  out-of-range union branch, invalid UTF-8, a logical value out of range;
* ``SCHEMA_UNAVAILABLE`` — an unknown single-object fingerprint, an unparseable registry
  schema (negatively cached), a writer schema the reader schema cannot resolve;
* ``NOT_READY`` — the registry has not answered yet, or answers 404 for the schema id
  (B21: the runtime retries the record, nothing is committed past it);
* ``UNKNOWN_SCHEMA`` — the registry has answered 404 for the id for
  ``unknown_schema_timeout``: the error carries ``on_unknown_schema`` as its policy
  (fail by default, naming the id and the record's position; skip only on opt-in).

The deserializer never counts: the deserializer stage counts every outcome by policy
(B28) and reads the policy from :attr:`AvroDeserializer.on_error`.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import Any, ClassVar

from fastavro.read import SchemaResolutionError
from spate import DeserError, DeserErrorKind, ErrorPolicy
from spate.ops import whole_payload
from spate.schema import Field, SchemaChanges

from spate_avro._confluent import ConfluentDeserializer
from spate_avro._describe import branch_fields, envelope_fields, record_fields
from spate_avro._registry import SchemaRegistryClient
from spate_avro._schema import DECODE_ERRORS, DecodeFn, build_decoder
from spate_avro.config import RegistrySettings

logger = logging.getLogger(__name__)

CONFLUENT_MAGIC = 0
"""First byte of a Confluent-framed payload; the next four are the schema id (big-endian)."""
SINGLE_OBJECT_MARKER = b"\xc3\x01"
"""First two bytes of a single-object payload; the next eight are the fingerprint."""

_schema_id = struct.Struct(">I").unpack_from


def _malformed(exc: BaseException) -> DeserError:
    text = str(exc)
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if len(detail) > 200:
        detail = detail[:200] + "..."
    return DeserError(f"malformed Avro payload ({detail})", DeserErrorKind.MALFORMED)


def _unresolvable(what: str, exc: SchemaResolutionError) -> DeserError:
    return DeserError(
        f"{what} cannot be read with the reader schema: {exc}", DeserErrorKind.SCHEMA_UNAVAILABLE
    )


class AvroDeserializer:
    """Base of the three modes: the policy attribute and ``close``."""

    many: ClassVar[bool] = False
    takes_bytes: ClassVar[bool] = True
    """Whole ``bytes`` payloads are decoded as they are (fastavro reads them fastest), and
    ``deserialize_batch`` frames them with no view per record (B97)."""

    def __init__(self, on_error: ErrorPolicy, described: Any | None = None) -> None:
        self.on_error = on_error
        """The record error policy; the deserializer stage reads it (B28)."""
        self._described = described
        self.envelope = "none"
        """``debezium``: the table is described by the change events' ``after`` record
        (``AvroConfig.envelope``)."""

    def record_fields(self) -> tuple[Field, ...] | None:
        """The fields of the records (the reader schema's, else the writer schema's when
        there is one), for table DDL; None for a union of records or an unknown schema."""
        if self._described is None:
            return None
        return envelope_fields(record_fields(self._described), self.envelope)

    def branch_fields(self) -> dict[str, tuple[Field, ...]] | None:
        """The fields of each record type of a union of records, by full name (for the
        DDL of a sink that takes one of them); None otherwise."""
        return branch_fields(self._described) if self._described is not None else None

    def deserialize(self, payload: bytes | memoryview) -> object:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release background resources (the registry fetcher). Called at pipeline end."""


class RawAvroDeserializer(AvroDeserializer):
    """``mode: raw`` — the payload is one Avro datum written with the configured schema."""

    def __init__(
        self,
        decode: DecodeFn,
        on_error: ErrorPolicy,
        described: Any | None = None,
        columnar: Any = None,
    ) -> None:
        super().__init__(on_error, described)
        self._decode = decode
        self.columnar = columnar
        """A :class:`~spate_avro._columnar.ColumnarAvroDecoder` (``spate[columnar]``) or None."""

    def deserialize(self, payload: bytes | memoryview) -> object:
        """Decode one payload on the pipeline thread; never blocks."""
        data: Any = payload if type(payload) is bytes else whole_payload(payload)
        try:
            return self._decode(data, 0)
        except SchemaResolutionError as exc:
            raise _unresolvable("the writer schema", exc) from None
        except DECODE_ERRORS as exc:
            raise _malformed(exc) from None

    def deserialize_batch(self, payloads: Sequence[bytes | memoryview]) -> Any:
        """The whole batch as columns: ``(frames, errors)`` (see ``spate_avro._columnar``)."""
        if self.columnar is None:
            from spate_avro._columnar import columnar_unavailable

            raise RuntimeError(
                columnar_unavailable()
                or "columnar Avro decoding is not available for this schema (a reader schema "
                "or a schema the columnar reader cannot take): batches decode as rows"
            )
        return self.columnar.decode(payloads)

    def close(self) -> None:
        if self.columnar is not None:
            self.columnar.close()


class SingleObjectAvroDeserializer(AvroDeserializer):
    """``mode: single_object`` — ``C3 01``, an 8-byte fingerprint, then the datum."""

    def __init__(self, decoders: dict[bytes, DecodeFn], on_error: ErrorPolicy) -> None:
        super().__init__(on_error)
        self._decoders = decoders

    def deserialize(self, payload: bytes | memoryview) -> object:
        """Decode one payload on the pipeline thread; never blocks."""
        data: Any = payload if type(payload) is bytes else whole_payload(payload)
        if len(data) < 10 or data[0] != 0xC3 or data[1] != 0x01:
            raise DeserError(
                "not a single-object Avro payload (expected marker C3 01 and a fingerprint, "
                f"got {bytes(data[:2]).hex(' ') or 'nothing'} in {len(data)} bytes)",
                DeserErrorKind.MALFORMED,
            )
        fingerprint = bytes(data[2:10])
        decode = self._decoders.get(fingerprint)
        if decode is None:
            raise DeserError(
                f"unknown schema fingerprint {fingerprint.hex()} (not one of the configured "
                "writer schemas)",
                DeserErrorKind.SCHEMA_UNAVAILABLE,
            )
        try:
            return decode(data, 10)
        except SchemaResolutionError as exc:
            raise _unresolvable(f"writer schema {fingerprint.hex()}", exc) from None
        except DECODE_ERRORS as exc:
            raise _malformed(exc) from None


class ConfluentAvroDeserializer(AvroDeserializer, ConfluentDeserializer):
    """``mode: confluent`` — magic byte 0, a 4-byte schema id, then the datum.

    Writer schemas come from the registry client's cache; a decode function is built
    once per schema id. A miss raises ``NOT_READY`` (never a drop, B21) until the id has
    been unknown to the registry for ``unknown_schema_timeout``; then ``UNKNOWN_SCHEMA``
    with the ``on_unknown_schema`` policy (B28). Without a reader schema, each new writer
    schema is announced to the sinks that evolve their tables before its first record is
    decoded (B60).
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        settings: RegistrySettings,
        *,
        reader: Any | None,
        described: Any | None = None,
        schema_changes: SchemaChanges | None = None,
    ) -> None:
        AvroDeserializer.__init__(
            self, settings.on_error, described if described is not None else reader
        )
        ConfluentDeserializer.__init__(self, client, settings, schema_changes)
        self._reader = reader
        self._decoders: dict[int, DecodeFn] = {}
        self.columnar: Any = None
        """Truthy when batches can be decoded as columns (``spate[columnar]``, no reader
        schema); the columnar decoder of each schema id is built on first use."""
        self._columnar: dict[int, Any] = {}

    def deserialize(self, payload: bytes | memoryview) -> object:
        """Decode one payload on the pipeline thread.

        Blocks for at most ``fetch_wait`` on the first record of a schema id not yet cached.
        """
        data: Any = payload if type(payload) is bytes else whole_payload(payload)
        if len(data) < 5 or data[0] != CONFLUENT_MAGIC:
            raise self._not_framed(data, "Avro", " and a 4-byte schema id")
        schema_id: int = _schema_id(data, 1)[0]
        decode = self._decoders.get(schema_id)
        if decode is None:
            decode = self._decoder_for(schema_id)
        try:
            return decode(data, 5)
        except SchemaResolutionError as exc:
            raise _unresolvable(f"schema id {schema_id}", exc) from None
        except DECODE_ERRORS as exc:
            raise _malformed(exc) from None

    def deserialize_batch(self, payloads: Sequence[bytes | memoryview]) -> Any:
        """The batch as columns, grouped by schema id: ``(frames, errors)``.

        Each id resolves through the registry as on the row path; an id that is not ready
        stalls the whole batch (``DeserError(NOT_READY)`` is raised, B21).
        """
        from spate_avro._columnar import ColumnarAvroDecoder

        groups: dict[int, list[int]] = {}
        errors: list[tuple[int, DeserError]] = []
        for index, payload in enumerate(payloads):  # whole ``bytes`` or byte views
            if len(payload) < 5 or payload[0] != CONFLUENT_MAGIC:
                try:
                    self.deserialize(payload)
                except DeserError as exc:
                    errors.append((index, exc))
                continue
            groups.setdefault(_schema_id(payload, 1)[0], []).append(index)
        frames: list[tuple[str | None, Any]] = []
        for schema_id, rows in groups.items():
            decoder = self._columnar.get(schema_id)
            if decoder is None:
                try:
                    decode = self._decoders.get(schema_id) or self._decoder_for(schema_id)
                    writer = self._lookup(schema_id)
                except DeserError as exc:
                    if exc.kind is DeserErrorKind.NOT_READY:
                        raise
                    errors.extend((row, exc) for row in rows)
                    continue
                decoder = self._columnar[schema_id] = ColumnarAvroDecoder(writer, decode)
            group_frames, group_errors = decoder.decode([payloads[r] for r in rows], 5)
            errors.extend((rows[i], exc) for i, exc in group_errors)
            frames.extend(self._in_batch(group_frames, rows))
        errors.sort(key=lambda item: item[0])
        return frames, errors

    def _decoder_for(self, schema_id: int) -> DecodeFn:
        writer = self._lookup(schema_id)
        decode = build_decoder(writer, self._reader)
        if self._reader is None and self._announcing:
            self._announce(schema_id, envelope_fields(record_fields(writer), self.envelope))
        self._decoders[schema_id] = decode
        return decode

    def close(self) -> None:
        """Stop the registry client's fetch thread and release the columnar decoders
        (the pipeline calls it at the end)."""
        try:
            for decoder in self._columnar.values():
                decoder.close()
        finally:
            ConfluentDeserializer.close(self)
