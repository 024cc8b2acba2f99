"""Parsed schemas and the per-schema decode functions the deserializer calls per record.

Owns: loading a schema from ``inline:`` / ``path:`` text, parsing it once with fastavro,
the single-object fingerprint (CRC-64-AVRO of the parsing canonical form), and building a
:data:`DecodeFn` for a writer schema (and optional reader schema). Does not own wire
prefixes (magic byte, schema id, single-object marker): the deserializer strips those.

Decoding is fastavro's ``schemaless_reader`` on an ``io.BytesIO`` of the payload; for a
``bytes`` payload that wraps the object without copying. A top-level union is decoded by
reading the branch index (a zig-zag varint) here and then the branch with its own parsed
schema, so the result can carry the branch's full name as a :class:`NamedRecord`.

Every decode checks that the whole payload was consumed: trailing bytes mean the payload
was not written with this schema and are reported as malformed (B28). Reader schemas
follow Avro schema resolution as fastavro implements it: added fields need defaults,
removed fields are skipped, promotions (int→long→float→double, string↔bytes) apply, and a
narrowing (long→int, double→float) is refused rather than wrapped.
"""

from __future__ import annotations

import io
import json
import logging
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint, to_parsing_canonical_form
from spate import DeserError, DeserErrorKind

from spate_avro._config import SchemaSource

logger = logging.getLogger(__name__)

DecodeFn = Callable[[Any, int], object]
"""``decode(data, start)``: decode the Avro datum in ``data[start:]`` (bytes or a view)."""

DECODE_ERRORS: tuple[type[BaseException], ...] = (
    EOFError,
    ValueError,  # includes UnicodeDecodeError and bad logical values
    IndexError,
    KeyError,
    TypeError,
    ArithmeticError,  # OverflowError from dates and timestamps out of range
    struct.error,
    OSError,  # platform limits of datetime conversions
    RecursionError,
    MemoryError,
)
"""What fastavro raises on bytes that are not a valid encoding of the schema."""


class NamedRecord(NamedTuple):
    """A value decoded from a top-level union: the branch's full name and its value.

    ``name`` is the full name of the branch (``spate.datagen.PaymentCaptured``; for an
    unnamed branch, its type, e.g. ``string``); ``record`` is the decoded value (a
    ``dict`` for a record). Being a tuple, it unpacks like fastavro's
    ``return_record_name=True`` results: ``name, record = value``.
    """

    name: str
    record: Any

    @property
    def kind(self) -> str:
        """The name without its namespace (``PaymentCaptured``)."""
        return self.name.rpartition(".")[2]


def load_schema_text(source: SchemaSource) -> str:
    """The JSON text of ``source``; raises ``ValueError`` if the file cannot be read."""
    if source.inline is not None:
        return source.inline
    path = source.path or ""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror}") from None


def parse_schema_text(text: str) -> Any:
    """Parse Avro schema JSON text with fastavro; raises ``ValueError`` when invalid."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"schema is not valid JSON: {exc}") from None
    try:
        return fastavro.parse_schema(raw)
    except Exception as exc:  # fastavro raises several unrelated classes for bad schemas
        raise ValueError(f"invalid Avro schema: {exc}") from None


def single_object_fingerprint(parsed: Any) -> bytes:
    """The 8 bytes that follow ``C3 01`` in single-object encoding for this schema.

    fastavro renders the CRC-64-AVRO fingerprint in little-endian byte order, which is
    the order the Avro specification puts on the wire.
    """
    canonical = to_parsing_canonical_form(parsed)
    return bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))


def schema_name(parsed: Any) -> str:
    """The full name of a named schema, or the type of an unnamed one."""
    if isinstance(parsed, dict):
        name = parsed.get("name")
        if isinstance(name, str):
            return name
        return str(parsed.get("type"))
    if isinstance(parsed, list):
        return "union"
    return str(parsed)


def is_union(parsed: Any) -> bool:
    return isinstance(parsed, list)


def _trailing(data: Any, end: int, size: int) -> DeserError:
    return DeserError(
        f"{size - end} trailing bytes after the Avro datum ({size} bytes in the payload)",
        DeserErrorKind.MALFORMED,
    )


def _datum_decoder(writer: Any, reader: Any | None) -> DecodeFn:
    read = fastavro.schemaless_reader
    bytes_io = io.BytesIO

    if reader is None:

        def decode(data: Any, start: int) -> object:
            bio = bytes_io(data)
            if start:
                bio.seek(start)
            value = read(bio, writer)
            end = bio.tell()
            if end != len(data):
                raise _trailing(data, end, len(data))
            return value

    else:

        def decode(data: Any, start: int) -> object:
            bio = bytes_io(data)
            if start:
                bio.seek(start)
            value = read(bio, writer, reader)
            end = bio.tell()
            if end != len(data):
                raise _trailing(data, end, len(data))
            return value

    return decode


def _read_long(data: Any, pos: int) -> tuple[int, int]:
    """Decode the zig-zag varint at ``data[pos]``; returns ``(value, next_pos)``."""
    shift = 0
    acc = 0
    while True:
        if pos >= len(data):
            raise EOFError("payload ends inside a union branch index")
        byte = data[pos]
        pos += 1
        acc |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (acc >> 1) ^ -(acc & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("union branch index is longer than 10 bytes")


def _reader_branch(writer_branch: Any, reader: Any) -> Any | None:
    """The reader schema a writer union branch resolves against (None: no match)."""
    if not is_union(reader):
        return reader
    wanted = schema_name(writer_branch)
    for branch in reader:
        if schema_name(branch) == wanted:
            return branch
        aliases = branch.get("aliases", ()) if isinstance(branch, dict) else ()
        if wanted in aliases or wanted.rpartition(".")[2] in aliases:
            return branch
    return None


def _unmatched_branch(name: str) -> DecodeFn:
    def decode(data: Any, start: int) -> object:
        raise DeserError(
            f"writer union branch {name} has no match in the reader schema",
            DeserErrorKind.SCHEMA_UNAVAILABLE,
        )

    return decode


def _union_decoder(writer: list[Any], reader: Any | None) -> DecodeFn:
    names = [schema_name(branch) for branch in writer]
    named_output = reader is None or is_union(reader)
    decoders: list[DecodeFn] = []
    for branch in writer:
        if reader is None:
            decoders.append(_datum_decoder(branch, None))
            continue
        target = _reader_branch(branch, reader)
        if target is None:
            decoders.append(_unmatched_branch(schema_name(branch)))
        else:
            decoders.append(_datum_decoder(branch, target))
    count = len(decoders)
    make = tuple.__new__
    record_type = NamedRecord

    def decode(data: Any, start: int) -> object:
        if start >= len(data):
            raise EOFError("payload ends before the union branch index")
        byte = data[start]
        if byte < 0x80:
            index = (byte >> 1) ^ -(byte & 1)
            pos = start + 1
        else:
            index, pos = _read_long(data, start)
        if not 0 <= index < count:
            raise DeserError(
                f"union branch index {index} is out of range (the schema has {count} branches)",
                DeserErrorKind.MALFORMED,
            )
        value = decoders[index](data, pos)
        if named_output:
            return make(record_type, (names[index], value))
        return value

    return decode


def build_decoder(writer: Any, reader: Any | None = None) -> DecodeFn:
    """A decode function for data written with ``writer`` (parsed), read as ``reader``.

    Called once per schema (never per record). A top-level writer union yields
    :class:`NamedRecord` values unless the reader schema is a single non-union schema.
    """
    if reader is not None and reader == writer:
        reader = None
    if is_union(writer):
        return _union_decoder(writer, reader)
    return _datum_decoder(writer, reader)


def resolution_problem(writer: Any, reader: Any) -> str | None:
    """Try a few generated writer data through ``reader``; describe the first failure.

    fastavro resolves schemas lazily while reading, so a reader schema that cannot read
    the writer's data (a narrowing such as long→int, a new field without a default)
    would otherwise only show on the first record. This check runs at build time.
    """
    from fastavro.utils import generate_many

    decode = build_decoder(writer, reader)
    branches = writer if is_union(writer) else [writer]
    for index, branch in enumerate(branches):
        try:
            samples = list(generate_many(branch, 3))
        except Exception:  # generation is best effort; decoding still checks every record
            logger.debug("cannot generate sample data for %s", schema_name(branch))
            continue
        for sample in samples:
            buf = io.BytesIO()
            if is_union(writer):
                fastavro.schemaless_writer(buf, {"type": "long"}, index)
            fastavro.schemaless_writer(buf, branch, sample)
            try:
                decode(buf.getvalue(), 0)
            except SchemaResolutionError as exc:
                return f"{schema_name(branch)}: {exc}"
            except DeserError as exc:
                return exc.reason
            except DECODE_ERRORS:
                continue
    return None
