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
from typing import Any, NamedTuple

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form
from spate import DeserError, DeserErrorKind

from spate_avro.config import SchemaSource

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
    return source.read_text()


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


def _trailing(end: int, size: int) -> DeserError:
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
                raise _trailing(end, len(data))
            return value

    else:

        def decode(data: Any, start: int) -> object:
            bio = bytes_io(data)
            if start:
                bio.seek(start)
            value = read(bio, writer, reader)
            end = bio.tell()
            if end != len(data):
                raise _trailing(end, len(data))
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
    # A branch may name a type defined inside another branch: decode it with the definition.
    defined = _named_types(writer, {})
    decoders: list[DecodeFn] = []
    for branch in writer:
        if isinstance(branch, str) and branch in defined:
            branch = defined[branch]
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


_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_NARROWINGS = frozenset(
    {
        ("long", "int"),
        ("double", "float"),
        ("double", "int"),
        ("double", "long"),
        ("float", "int"),
        ("float", "long"),
    }
)
_NAMED = frozenset({"record", "error", "enum", "fixed"})


def _named_types(schema: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every named type defined in a parsed schema, by full name."""
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in _NAMED and isinstance(schema.get("name"), str):
            if schema["name"] in out:
                return out
            out[schema["name"]] = schema
        if kind in ("record", "error"):
            for field in schema.get("fields", ()):
                _named_types(field.get("type"), out)
        elif kind == "array":
            _named_types(schema.get("items"), out)
        elif kind == "map":
            _named_types(schema.get("values"), out)
        elif isinstance(kind, (dict, list)):
            _named_types(kind, out)
    return out


class _Resolver:
    """Avro schema resolution rules, checked statically on two parsed schemas."""

    def __init__(self, writer: Any, reader: Any) -> None:
        self._wnames = _named_types(writer, {})
        self._rnames = _named_types(reader, {})
        self._seen: set[tuple[int, int]] = set()

    def _deref(self, schema: Any, names: dict[str, Any]) -> Any:
        while True:
            if isinstance(schema, str) and schema in names:
                schema = names[schema]
            elif isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
                schema = schema["type"]
            elif isinstance(schema, dict) and schema.get("type") in names:
                schema = names[schema["type"]]
            else:
                return schema

    @staticmethod
    def _kind(schema: Any) -> str:
        if isinstance(schema, list):
            return "union"
        if isinstance(schema, dict):
            return str(schema.get("type"))
        return str(schema)

    @staticmethod
    def _short(schema: Any) -> str:
        return str(schema.get("name", "")).rpartition(".")[2]

    def _same_name(self, writer: Any, reader: Any) -> bool:
        short = self._short(writer)
        aliases = {str(a).rpartition(".")[2] for a in reader.get("aliases", ())}
        return short == self._short(reader) or short in aliases

    def _matches(self, writer: Any, reader: Any) -> bool:
        wk, rk = self._kind(writer), self._kind(reader)
        if wk in _NAMED or rk in _NAMED:
            return wk == rk and self._same_name(writer, reader)
        return wk == rk or rk in _PROMOTIONS.get(wk, ())

    def check(self, writer: Any, reader: Any, path: str) -> str | None:
        writer = self._deref(writer, self._wnames)
        reader = self._deref(reader, self._rnames)
        key = (id(writer), id(reader))
        if key in self._seen:
            return None  # a recursive type already being checked
        self._seen.add(key)
        wk, rk = self._kind(writer), self._kind(reader)
        where = path or "the value"
        if wk == "union":
            for branch in writer:
                problem = self.check(branch, reader, path)
                if problem is not None:
                    return problem
            return None
        if rk == "union":
            for branch in reader:
                if self._matches(writer, self._deref(branch, self._rnames)):
                    return self.check(writer, branch, path)
            return f"{where}: no branch of the reader union can hold a writer {wk}"
        if wk != rk:
            if rk in _PROMOTIONS.get(wk, ()):
                return None
            if (wk, rk) in _NARROWINGS:
                return f"{where}: narrowing writer {wk} to {rk} could overflow; not allowed"
            return f"{where}: writer {wk} cannot be read as {rk}"
        if wk in _NAMED and not self._same_name(writer, reader):
            return (
                f"{where}: writer {writer.get('name')} does not match reader {reader.get('name')}"
            )
        if wk in ("record", "error"):
            return self._check_record(writer, reader, path)
        if wk == "enum":
            missing = [s for s in writer.get("symbols", ()) if s not in reader.get("symbols", ())]
            if missing and "default" not in reader:
                return f"{where}: reader enum has no symbol {missing[0]!r} and no default"
        elif wk == "fixed" and writer.get("size") != reader.get("size"):
            return (
                f"{where}: fixed size {writer.get('size')} cannot be read as {reader.get('size')}"
            )
        elif wk == "array":
            return self.check(writer.get("items"), reader.get("items"), f"{path}[]")
        elif wk == "map":
            return self.check(writer.get("values"), reader.get("values"), f"{path}{{}}")
        return None

    def _check_record(self, writer: Any, reader: Any, path: str) -> str | None:
        written = {f["name"]: f for f in writer.get("fields", ())}
        for field in reader.get("fields", ()):
            name = field["name"]
            source = written.get(name)
            if source is None:
                for alias in field.get("aliases", ()):
                    source = written.get(alias)
                    if source is not None:
                        break
            sub = f"{path}.{name}" if path else name
            if source is None:
                if "default" not in field:
                    return f"{sub}: the writer has no such field and the reader gives no default"
                continue
            problem = self.check(source["type"], field["type"], sub)
            if problem is not None:
                return problem
        return None


def resolution_problem(writer: Any, reader: Any) -> str | None:
    """Why data written with ``writer`` cannot be read as ``reader`` (None: it can).

    fastavro resolves schemas lazily while reading, so a reader schema that cannot read
    the writer's data (a narrowing such as long→int, a new field without a default)
    would otherwise only show on the first such record. This static check of the Avro
    resolution rules runs at build time, once per writer schema, and is deterministic.
    A top-level writer union is checked branch by branch against the reader branch of
    the same name, as the decoder pairs them.
    """
    if is_union(writer) and is_union(reader):
        for branch in writer:
            target = _reader_branch(branch, reader)
            if target is None:
                return (
                    f"writer union branch {schema_name(branch)} has no match in the reader schema"
                )
            problem = _Resolver(writer, reader).check(branch, target, "")
            if problem is not None:
                return f"{schema_name(branch)}: {problem}"
        return None
    return _Resolver(writer, reader).check(writer, reader, "")
