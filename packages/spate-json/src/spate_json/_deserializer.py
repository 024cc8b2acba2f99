"""The JSON deserializers for the three framings: single, ndjson and array (B21, B28).

Owns the per-record path: ``orjson.loads`` straight on the payload view (orjson reads
any buffer, so neither a whole ``bytes`` payload nor a slice is copied), the top-level
type check, the optional target-type conversion, and turning every failure into a
:class:`~spate.errors.DeserError` (always ``MALFORMED``: JSON needs no schema fetch, so
it is never "not ready").

* ``single`` — one value per payload; an empty (or blank) payload is :data:`NO_RECORD`.
* ``ndjson`` — one value per line; blank lines are skipped; a bad line becomes one
  ``DeserError`` item among the results, the other lines still decode.
* ``array`` — the payload must be one JSON array whose every element is a good record;
  otherwise the whole payload is one error, none of its elements pass.

The deserializer never counts: the deserializer stage counts outcomes and applies
:attr:`JsonDeserializer.on_error` (B28).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import orjson
from spate import NO_RECORD, DeserError, DeserErrorKind, ErrorPolicy
from spate.ops import whole_payload
from spate.plugins import install_hint
from spate.schema import Field

from spate_json._target import Converter, FieldError, json_type

logger = logging.getLogger(__name__)

_DecodeError = orjson.JSONDecodeError
_loads = orjson.loads


def _invalid(exc: Exception, where: str = "") -> DeserError:
    return DeserError(f"{where}invalid JSON: {exc}", DeserErrorKind.MALFORMED)


def _wrong_type(value: object, where: str = "") -> DeserError:
    return DeserError(
        f"{where}expected a JSON object, got {json_type(value)}", DeserErrorKind.MALFORMED
    )


def _field_error(exc: FieldError, where: str = "") -> DeserError:
    return DeserError(f"{where}{exc.render()}", DeserErrorKind.MALFORMED)


def _blank(payload: Any) -> bool:
    return not bytes(payload).strip()


class JsonDeserializer:
    """Base of the three framings: the policy the stage reads, and the record checks."""

    many: ClassVar[bool] = False
    takes_bytes: ClassVar[bool] = False

    def __init__(
        self, *, on_error: ErrorPolicy, objects_only: bool, convert: Converter | None
    ) -> None:
        self.on_error = on_error
        """The record error policy; the deserializer stage reads it (B28)."""
        self._objects_only = objects_only
        self._convert = convert
        self.described: tuple[Field, ...] | None = None
        """The record fields of the configured JSON Schema, if one is given."""
        self.columnar: Any = None
        """A :class:`~spate_json._columnar.ColumnarJsonDecoder` (``spate[columnar]``,
        ``single`` and ``ndjson`` framings of objects) or None: the row path only."""

    def record_fields(self) -> tuple[Field, ...] | None:
        """The fields the ``schema`` describes, for table DDL; None without one."""
        return self.described

    def reference(self, payload: bytes | memoryview) -> list[object]:
        """The row path's records of one payload, ``DeserError`` items for the bad ones
        (the columnar decoder's reference, B86)."""
        raise NotImplementedError

    def deserialize_batch(self, payloads: Sequence[bytes | memoryview]) -> Any:
        """The whole batch as columns: ``(frames, errors, empty)`` (see
        ``spate_json._columnar``)."""
        if self.columnar is None:
            raise RuntimeError(
                "columnar JSON decoding is not available: "
                + install_hint("spate-json", "columnar", dist_extra="columnar")
            )
        return self.columnar.decode(payloads)

    def close(self) -> None:
        """Nothing to release; present so every deserializer can be closed alike."""


class SingleJsonDeserializer(JsonDeserializer):
    """``framing: single`` — one JSON value per payload.

    :meth:`create` picks a subclass specialised for the configuration, so the per-record
    method does no configuration checks of its own (docs/development.md, performance rules).
    """

    many: ClassVar[bool] = False
    takes_bytes: ClassVar[bool] = True
    """orjson reads whole ``bytes`` payloads as they are, without a view per record."""

    @staticmethod
    def create(
        *, on_error: ErrorPolicy, objects_only: bool, convert: Converter | None
    ) -> SingleJsonDeserializer:
        """The specialised deserializer for this configuration."""
        if convert is not None:
            kind: type[SingleJsonDeserializer] = SingleJsonDeserializer
        elif objects_only:
            kind = _SingleObject
        else:
            kind = _SingleAny
        return kind(on_error=on_error, objects_only=objects_only, convert=convert)

    def reference(self, payload: bytes | memoryview) -> list[object]:
        try:
            return [self.deserialize(payload)]
        except DeserError as exc:
            return [exc]

    def deserialize(self, payload: bytes | memoryview) -> object:
        """Decode one payload on the pipeline thread; never blocks."""
        try:
            value = _loads(payload)
        except _DecodeError as exc:
            if _blank(payload):
                return NO_RECORD
            raise _invalid(exc) from None
        if self._objects_only and type(value) is not dict:
            raise _wrong_type(value)
        convert = self._convert
        if convert is not None:
            try:
                return convert(value)
            except FieldError as exc:
                raise _field_error(exc) from None
        return value


class _SingleObject(SingleJsonDeserializer):
    """``single`` with ``top_level: object`` and no target type: the common case."""

    def deserialize(self, payload: bytes | memoryview) -> object:
        try:
            value = _loads(payload)
        except _DecodeError as exc:
            if _blank(payload):
                return NO_RECORD
            raise _invalid(exc) from None
        if type(value) is dict:
            return value
        raise _wrong_type(value)


class _SingleAny(SingleJsonDeserializer):
    """``single`` with ``top_level: any`` and no target type."""

    def deserialize(self, payload: bytes | memoryview) -> object:
        try:
            return _loads(payload)
        except _DecodeError as exc:
            if _blank(payload):
                return NO_RECORD
            raise _invalid(exc) from None


class NdjsonDeserializer(JsonDeserializer):
    """``framing: ndjson`` — newline-delimited values; one bad line is one bad record."""

    many: ClassVar[bool] = True
    takes_bytes: ClassVar[bool] = True
    """Whole ``bytes`` payloads are split as they are, without a view per payload."""

    def deserialize_many(self, payload: bytes | memoryview) -> list[object]:
        """Decode every line; bad lines come back as ``DeserError`` items. Never blocks."""
        data: Any = payload if type(payload) is bytes else whole_payload(payload)
        if type(data) is not bytes:
            data = bytes(data)  # bytes.split needs bytes; one copy per chunk
        loads = _loads
        objects_only = self._objects_only
        convert = self._convert
        out: list[object] = []
        for number, line in enumerate(data.split(b"\n"), 1):
            try:
                value = loads(line)
            except _DecodeError as exc:
                if not line.strip():
                    continue
                out.append(_invalid(exc, f"line {number}: "))
                continue
            if objects_only and type(value) is not dict:
                out.append(_wrong_type(value, f"line {number}: "))
                continue
            if convert is not None:
                try:
                    value = convert(value)
                except FieldError as exc:
                    out.append(_field_error(exc, f"line {number}: "))
                    continue
            out.append(value)
        return out

    def reference(self, payload: bytes | memoryview) -> list[object]:
        return self.deserialize_many(payload)


class ArrayJsonDeserializer(JsonDeserializer):
    """``framing: array`` — one JSON array per payload, all records or none (B21)."""

    many: ClassVar[bool] = True

    def deserialize_many(self, payload: memoryview) -> list[object]:
        """Decode the array; raise ``DeserError`` if any part is bad. Never blocks."""
        try:
            value = _loads(payload)
        except _DecodeError as exc:
            if _blank(payload):
                return []
            raise _invalid(exc) from None
        if type(value) is not list:
            raise DeserError(
                f"expected a JSON array, got {json_type(value)}", DeserErrorKind.MALFORMED
            )
        if self._objects_only:
            for index, element in enumerate(value):
                if type(element) is not dict:
                    raise _wrong_type(element, f"element {index}: ")
        convert = self._convert
        if convert is None:
            return value
        out: list[object] = []
        for index, element in enumerate(value):
            try:
                out.append(convert(element))
            except FieldError as exc:
                raise _field_error(exc, f"element {index}: ") from None
        return out
