"""Columnar JSON decoding: a batch of payloads into polars DataFrames (``spate[columnar]``).

A batch's JSON objects are read at once by Arrow's JSON reader (``pyarrow.json``, C++,
multi-threaded) into Arrow columns, with no Python object per record; the table becomes
one polars DataFrame with a ``__spate_row`` column (each record's index in the batch).
``framing: single`` reads one object per payload, ``framing: ndjson`` one per line.

Exactness (B28, B86). Arrow's reader is more lenient than orjson, the row path's
decoder: it reads two objects on one line as two rows, skips blank lines, takes ``NaN``
and ``Infinity``, and may keep invalid UTF-8. The fast path joins the batch's records
with newlines and reads them with one reader call; it is taken only when every record is
one line of its own that opens with ``{`` and closes with ``}`` (no raw line break, which
JSON text holds only escaped, so one means a multi-line object; no carriage return; no
blank record), the batch is valid UTF-8 (one scan when it is not ASCII), the reader
returns one row per record (so row ``i`` is record ``i``: such a line reads as one row or
more, or fails), and no number is NaN or infinite; with a ``target`` type, its fields are
the explicit schema and nothing the target would complete or refuse shows (see
:func:`declared_schema`). These checks are C-speed: the payloads' first and last bytes,
one ``memchr`` scan of their concatenation, the UTF-8 scan, the reader's own row count.
Otherwise the batch is decoded
record by record with the row path's own deserializer (the reference): its errors are
the row path's errors for the same records, its ``NO_RECORD`` (a blank payload) is no
row, and the values it accepts are written back compactly by orjson and read as columns
again. A value Arrow still cannot take (a value whose JSON type differs from the same
field's in other records of the batch) is split off into a frame of its own; one that
Arrow refuses even alone is a record error for that record.

Integers Arrow reads as doubles (in a field that also holds fractions, or beyond int64,
which orjson reads exactly up to 2^64 - 1) are read again, off the fast path, as
``int64`` or ``uint64`` where the reference holds only integers there (B138), or as
``decimal128(38, 0)`` where those integers are negative and beyond int64 together
(B170); so is a declared ``int`` field holding an integer beyond int64, which the
reference takes (B340). An array of one record mixing integers and fractions stays
doubles when each integer is exact in a double (up to 2^53): every ClickHouse column
coerces such an integer as the float of the same value, or refuses the fraction beside
it, so the record is stored or refused as on the row path (B170); beside an integer
beyond 2^53 it is a record error on this path only.

A batch with a record nested :data:`DEPTH_LIMIT` levels or more also goes to the
reference: orjson refuses documents nested deeper than 1024 levels (Arrow's reader does
not), and a record it accepts that is nested that deep is a record error here, as no
frame holds it.

Strings that look like timestamps stay strings, as on the row path: a field Arrow infers
as a timestamp is read again as a string.

Arrays holding nulls (B340). Arrow's reader, inferring the item type of an array whose
first items are nulls (``[null, 3]``, at any depth: arrays of objects, arrays inside
objects, nested arrays), drops those nulls from the items and builds a list column whose
offsets run past them. Every table read is validated (buffer sizes only, no scan of the
values); one that fails is read again with its own inferred types as the explicit
schema, which keeps the nulls. A table still broken, or one polars refuses to take, is
not vouched for: off the fast path it is split until each record that cannot be read as
columns is a record error of its own (B341), never an error of the whole batch.
"""

from __future__ import annotations

import dataclasses
import decimal
import importlib.util
import types
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter, itemgetter
from typing import Any, Union, get_args, get_origin, get_type_hints

import orjson
from spate import NO_RECORD, DeserError, DeserErrorKind
from spate.records import ROW_COLUMN

_obj = attrgetter("obj")
_BLOCK = 1 << 24
"""The reader's block size: a batch of up to 16 MiB is one block."""

DecodedFrames = tuple[list[tuple[str | None, Any]], list[tuple[int, DeserError]], int]
"""``(frames, errors, empty)``: ``(None, polars DataFrame)`` per frame with a
``__spate_row`` column, ``(batch index, DeserError)`` for each bad record (several for
one ndjson payload with several bad lines), and how many payloads held no record."""

Reference = Callable[[bytes | memoryview], list[object]]
"""The row path's decoding of one payload: its records, and ``DeserError`` items."""


def columnar_available() -> bool:
    """Whether the ``columnar`` extra (polars, pyarrow) is installed.

    Looked up, not imported: a row pipeline builds the columnar decoder without using
    it, and importing polars and pyarrow would cost every process start about a second.
    """
    return all(importlib.util.find_spec(name) is not None for name in ("polars", "pyarrow"))


ArrowType = str | tuple[str, "ArrowType"]
"""An Arrow type by name: a ``pyarrow`` factory (``"int64"``) or ``("list_", item)``."""


def _arrow(t: ArrowType) -> Any:
    """The Arrow type named by ``t``."""
    import pyarrow as pa

    if isinstance(t, tuple):
        return pa.list_(_arrow(t[1]))
    return getattr(pa, t)()


@dataclasses.dataclass(frozen=True, slots=True)
class DeclaredSchema:
    """The columns of a ``target`` dataclass, and which fields may hold nulls.

    ``fields`` are ``(name, Arrow type name)`` pairs (see :func:`_arrow_type`), made into
    an Arrow schema only by the first batch, so that building imports no pyarrow.
    ``strict`` fields are the ones where a null in the frame cannot be told apart from a
    value the row path refuses or completes (a missing field with a default, an explicit
    ``null`` for a non-optional field): a null there sends the batch to the reference.
    """

    fields: tuple[tuple[str, ArrowType], ...]
    strict: tuple[str, ...]
    unknown_fields_error: bool

    def arrow_schema(self) -> Any:
        """The Arrow schema of :attr:`fields`."""
        import pyarrow as pa

        return pa.schema([pa.field(name, _arrow(t)) for name, t in self.fields])


def _arrow_type(tp: Any) -> tuple[ArrowType, bool]:
    """``(Arrow type name, optional)`` of a field type; ``ValueError`` when not columnar."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        rest = [o for o in get_args(tp) if o is not type(None)]
        if len(rest) != 1:
            raise ValueError(f"unsupported union {tp!r}")
        inner, _ = _arrow_type(rest[0])
        return inner, True
    if tp is bool:
        return "bool_", False
    if tp is int:
        return "int64", False
    if tp is float:
        return "float64", False
    if tp is str:
        return "string", False
    if origin is list or (origin is tuple and get_args(tp)[1:] == (Ellipsis,)):
        inner, optional = _arrow_type(get_args(tp)[0])
        if optional:
            raise ValueError(f"unsupported element type in {tp!r}")
        return ("list_", inner), False
    raise ValueError(f"field type {tp!r} has no columnar form")


def declared_schema(target: type[Any], *, unknown_fields_error: bool) -> DeclaredSchema | None:
    """The declared schema of a flat ``target`` dataclass (scalars, ``X | None``, lists
    of scalars), or None when a field has no columnar form (the pipeline keeps rows)."""
    hints = get_type_hints(target)
    fields = []
    strict = []
    for field in dataclasses.fields(target):
        if not field.init:
            return None
        try:
            arrow, optional = _arrow_type(hints[field.name])
        except ValueError:
            return None
        fields.append((field.name, arrow))
        if not (optional and field.default is None):
            strict.append(field.name)
    return DeclaredSchema(tuple(fields), tuple(strict), unknown_fields_error)


def _no_timestamps(t: Any) -> Any:
    """``t`` with every inferred timestamp replaced by a string (as orjson reads it)."""
    import pyarrow as pa

    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _no_timestamps(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_no_timestamps(t.value_type))
    return t


def _typed_nulls(t: Any) -> Any:
    """``t`` with every null type made ``bool``: Arrow's reader, given a null type
    explicitly, still builds an array of several nulls in a row as one null (B340)."""
    import pyarrow as pa

    if pa.types.is_null(t):
        return pa.bool_()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _typed_nulls(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_typed_nulls(t.value_type))
    return t


def _as_type(array: Any, t: Any) -> Any:
    """``array`` (read with :func:`_typed_nulls` of ``t``) with its all-null ``bool``
    parts made ``t``'s null type again, as the reader infers them."""
    import pyarrow as pa

    if array.type == t:
        return array
    if pa.types.is_null(t):
        return pa.nulls(len(array))
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([_as_type(c, t) for c in array.chunks], type=t)
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(t):
        children = [_as_type(array.field(i), f.type) for i, f in enumerate(t)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    # a list: the reader's arrays start at their items' first offset
    items = _as_type(array.values, t.value_type)
    return pa.ListArray.from_arrays(array.offsets, items, type=t, mask=mask)


def _levels(t: Any, limit: int) -> Iterator[list[Any]]:
    """The types of ``t`` level by level (struct fields, list items), at most ``limit``."""
    import pyarrow as pa

    level = [t]
    for _ in range(limit):
        yield level
        following: list[Any] = []
        for u in level:
            if pa.types.is_struct(u):
                following.extend(f.type for f in u)
            elif pa.types.is_list(u) or pa.types.is_large_list(u):
                following.append(u.value_type)
        if not following:
            return
        level = following


DEPTH_LIMIT = 64
"""Records nested this deep or deeper are not read as columns (polars overflows its
stack on types nested about a thousand levels deep; no ClickHouse column nests so)."""


def _deep(t: Any, limit: int = DEPTH_LIMIT + 1) -> bool:
    """Whether values of ``t`` (the wrapper included) nest ``limit`` levels or more."""
    return sum(1 for _ in _levels(t, limit)) >= limit


def _has_timestamps(t: Any) -> bool:
    import pyarrow as pa

    for level in _levels(t, 1 << 30):
        for u in level:
            if pa.types.is_timestamp(u) or pa.types.is_date(u) or pa.types.is_time(u):
                return True
    return False


def _floats(column: Any) -> Iterator[Any]:
    """The float arrays of a column at any depth (struct fields, list items) that hold
    a value."""
    import pyarrow as pa

    pending = list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]
    while pending:
        array = pending.pop()
        t = array.type
        if pa.types.is_floating(t):
            if array.null_count < len(array):
                yield array
        elif pa.types.is_struct(t):
            pending.extend(array.flatten())
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            pending.append(array.flatten())


def _non_finite(column: Any) -> bool:
    """Whether a column holds a NaN or an infinity at any depth (Arrow reads ``NaN``,
    ``Infinity`` and ``1e400``; orjson refuses them)."""
    import pyarrow.compute as pc

    return any(not pc.all(pc.is_finite(array)).as_py() for array in _floats(column))


def _whole_floats(column: Any) -> bool:
    """Whether a float column holds a whole number at any depth: Arrow reads a field
    whose values mix integers and fractions (or hold an integer beyond int64) as
    doubles, where orjson, the row path's decoder, keeps the integers as ``int``."""
    import pyarrow.compute as pc

    return any(pc.any(pc.equal(pc.floor(a), a)).as_py() for a in _floats(column))


_EXACT = 2**53
"""Integers up to this magnitude are exact in a double."""


def _same_kinds(read: object, value: object) -> bool:
    """Whether Arrow's value ``read`` means for every ClickHouse column what the row
    path's ``value`` means, at every depth: ``int`` where the reference has an ``int``
    (or a ``Decimal`` of the same whole value, for integers no 64-bit Arrow type holds
    together), ``float`` where it has a ``float``.

    An ``int`` read as a ``float`` is allowed where the same record holds a ``float`` at
    the same place (the items of one array, at any depth) and the integer is exact in a
    double: a column coerces such an integer as it does the float of the same value, or
    refuses the float beside it in the same record, so the record's outcome is the row
    path's (B170)."""
    if isinstance(value, dict) and isinstance(read, dict):
        return all(_field_same_kinds(read.get(k), v) for k, v in value.items())
    return _field_same_kinds(read, value)


def _leaves(read: object, value: object, path: str, out: list[tuple[str, object, object]]) -> bool:
    """Collect ``(place, read, value)`` for the numbers under ``value`` (a list's items
    share one place); False when a number's place is not a number in ``read``."""
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, (int, float)):
        out.append((path, read, value))
        return True
    if isinstance(value, dict):
        if not isinstance(read, dict):
            return True
        return all(_leaves(read.get(k), v, f"{path}.{k}", out) for k, v in value.items())
    if isinstance(value, list):
        if not isinstance(read, list):
            return True
        place = f"{path}[]"
        return all(_leaves(r, v, place, out) for r, v in zip(read, value, strict=False))
    return True


def _field_same_kinds(read: object, value: object) -> bool:
    leaves: list[tuple[str, object, object]] = []
    _leaves(read, value, "", leaves)
    floats = {place for place, _, v in leaves if isinstance(v, float)}
    for place, r, v in leaves:
        if isinstance(v, float):
            if type(r) is not float:
                return False
        elif type(r) is int:
            continue
        elif isinstance(r, decimal.Decimal):
            if r != v:
                return False
        elif not (type(r) is float and place in floats and isinstance(v, int) and abs(v) <= _EXACT):
            return False
    return True


_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


def _get(value: object, name: str) -> object:
    return value.get(name) if isinstance(value, dict) else None


def _integer_type(t: Any, values: list[object]) -> Any:
    """``t`` with each float or ``int64`` (at any depth) whose ``values`` are all ``int``
    made ``int64``, or ``uint64`` when one is beyond int64 and none is negative (orjson
    reads an integer up to 2^64 - 1 as an ``int``), or ``decimal128(38, 0)`` when they
    are negative and beyond int64 together; other types as they are."""
    import pyarrow as pa

    if pa.types.is_floating(t) or pa.types.is_int64(t):
        present = [v for v in values if v is not None]
        ints = [v for v in present if type(v) is int]
        if not ints or len(ints) != len(present):
            return t
        lo, hi = min(ints), max(ints)
        if _INT64[0] <= lo and hi <= _INT64[1]:
            return pa.int64()
        if lo >= 0 and hi <= _UINT64_MAX:
            return pa.uint64()
        if _INT64[0] <= lo and hi <= _UINT64_MAX:
            # negative integers and integers beyond int64 together (B170): decimals
            # hold them exactly, and a column coerces a whole decimal as the integer
            return pa.decimal128(38, 0)
        return t
    if pa.types.is_struct(t):
        return pa.struct(
            [pa.field(f.name, _integer_type(f.type, [_get(v, f.name) for v in values])) for f in t]
        )
    if pa.types.is_list(t):
        items = [x for v in values if isinstance(v, list) for x in v]
        return pa.list_(_integer_type(t.value_type, items))
    return t


def _valid(table: Any) -> bool:
    """Whether each of ``table``'s columns spans no more than its buffers hold (Arrow's
    cheap validation: lengths and offsets, not the values)."""
    import pyarrow as pa

    try:
        table.validate()
    except pa.ArrowInvalid:
        return False
    return True


def _one_object_a_line(body: bytes, lines: int) -> bool:
    """Whether each of the ``lines`` newline-separated lines of ``body`` opens with ``{``
    and closes with ``}``, with no carriage return anywhere (C-speed scans only)."""
    return (
        body[:1] == b"{"
        and body[-1:] == b"}"
        and b"\r" not in body
        and body.count(b"}\n{") == lines - 1
    )


_first = itemgetter(0)
_last = itemgetter(-1)
_OPEN, _CLOSE = ord("{"), ord("}")


def _one_object_each(payloads: Sequence[bytes | memoryview]) -> bool:
    """Whether each payload opens with ``{`` and closes with ``}``, with no line break and
    no carriage return anywhere: what :func:`_one_object_a_line` says of the payloads
    joined by newlines, read from the payloads' end bytes and one ``memchr`` scan of
    their concatenation instead of counting a three-byte pattern over the joined batch."""
    try:
        if set(map(_first, payloads)) != {_OPEN} or set(map(_last, payloads)) != {_CLOSE}:
            return False
    except IndexError:  # a blank payload
        return False
    whole = b"".join(payloads)
    return b"\n" not in whole and b"\r" not in whole


def _malformed(exc: BaseException) -> DeserError:
    detail = f"{type(exc).__name__}: {exc}"[:200]
    return DeserError(f"JSON record cannot be read as columns ({detail})", DeserErrorKind.MALFORMED)


class ColumnarJsonDecoder:
    """Decodes a batch of JSON payloads into frames (see the module docstring).

    ``reference`` is the row path's decoding of one payload (its records and errors);
    ``ndjson`` says whether a payload holds one object per line; ``declared`` is the
    schema of a ``target`` type (None: the types are inferred per batch).
    """

    def __init__(
        self, reference: Reference, *, ndjson: bool, declared: DeclaredSchema | None
    ) -> None:
        self._reference = reference
        self._ndjson = ndjson
        self._declared = declared
        self._loaded = False
        """Whether :meth:`_load` has run: polars and pyarrow are imported by the first
        batch, so a pipeline that never decodes columns never imports them."""

    def _load(self) -> None:
        import polars as pl
        import pyarrow as pa
        import pyarrow.json as pj

        self._pl = pl
        self._pa = pa
        self._pj = pj
        declared = self._declared
        # With a target, its fields are the explicit schema; keys it does not declare
        # fail the read (the batch goes to the reference) or are left out, as the target
        # says. Without one, the types are inferred per batch.
        self._lines = pj.ParseOptions(
            explicit_schema=None if declared is None else declared.arrow_schema(),
            newlines_in_values=False,
            unexpected_field_behavior=(
                "infer"
                if declared is None
                else "error"
                if declared.unknown_fields_error
                else "ignore"
            ),
        )
        # One block for a whole batch (the reader's threads split larger ones).
        self._read_options = pj.ReadOptions(block_size=_BLOCK)
        self._loaded = True

    def close(self) -> None:
        """Nothing to release."""

    # -- the whole batch --------------------------------------------------------------------

    def decode(self, payloads: Sequence[bytes | memoryview]) -> DecodedFrames:
        """Frames and errors for ``payloads``; called on the pipeline thread, never blocks."""
        if not payloads:
            return [], [], 0
        if not self._loaded:
            self._load()
        fast = self._fast(payloads)
        if fast is not None:
            return [(None, fast)], [], 0
        return self._by_record(payloads)

    def _fast(self, payloads: Sequence[bytes | memoryview]) -> Any:
        """The batch's frame when every record is vouched for, else None.

        The payloads are joined by newlines and read at once. Each must be one line
        ``{...}`` of its own: no raw line break (JSON text has them only escaped, so one
        means a multi-line object) and no carriage return, every line opening with ``{``
        and closing with ``}`` (no blank payload, which the reader would skip). Such a
        line reads as one row or more, or fails the read, so a row count equal to the
        line count maps row ``i`` to line ``i``.
        """
        if self._ndjson:
            # A Kafka batch's whole ``bytes`` as they are, else the objects under the views.
            datums: list[Any] = list(
                payloads if type(payloads[0]) is bytes else map(_obj, payloads)
            )
            if set(map(type, datums)) != {bytes} or sum(map(len, datums)) != sum(
                map(len, payloads)
            ):
                datums = [bytes(v) for v in payloads]  # views that are slices of larger buffers
            lines = [d.rstrip(b"\n") for d in datums]
            per_payload = [d.count(b"\n") + 1 for d in lines]
            counts: list[int] | None = per_payload
            records = sum(per_payload)
            body = b"\n".join(lines)
        else:
            counts = None
            records = len(payloads)
            if not _one_object_each(payloads):
                return None  # a multi-line or blank record: the reference reads it
            body = b"\n".join(payloads)  # joins the views' bytes, slices or not
        if counts is not None and not _one_object_a_line(body, records):
            return None
        frame = self._read_frame(body, records)
        if frame is None:
            return None
        pl = self._pl
        if counts is None:
            rows = pl.int_range(records, dtype=pl.UInt32, eager=True)
        else:
            rows = (
                pl.int_range(len(counts), dtype=pl.UInt32, eager=True)
                .repeat_by(pl.Series(counts, dtype=pl.UInt32))
                .explode()
            )
        frame.insert_column(frame.width, rows.alias(ROW_COLUMN))
        return frame

    def _read_frame(self, body: bytes, records: int, values: list[object] | None = None) -> Any:
        """The DataFrame of ``records`` lines, or None when they are not vouched for.

        ``values`` are the records as the reference decoded them (record by record), so
        a float column holding whole numbers is checked against them; without them such
        a column is not vouched for (see :func:`_whole_floats`)."""
        pa = self._pa
        buffer = pa.py_buffer(body)
        if not body.isascii():
            try:
                pa.StringArray.from_buffers(
                    1, pa.py_buffer(b"\0\0\0\0" + len(buffer).to_bytes(4, "little")), buffer
                ).validate(full=True)
            except pa.ArrowInvalid:
                return None  # not UTF-8 (Arrow's reader keeps it): the reference names it
        table = self._read(buffer)
        if table is None and values is not None and self._declared is not None:
            # a declared ``int`` holding an integer beyond int64, which the row path
            # takes (B340): read as the inferred path reads it (B138, B170)
            table = self._as_integers(buffer, self._declared.arrow_schema(), values)
        if table is None or table.num_rows != records:
            return None
        # Arrow reads a field holding integers and fractions (or an integer beyond int64)
        # as doubles: an integer would become a float the row path never sees. Checked
        # per record against the reference's values (off the fast path only); a field
        # whose values are all integers is read again as int64 or uint64 (B138).
        if any(map(_whole_floats, table.columns)):
            if values is None:
                return None
            if not all(map(_same_kinds, table.to_pylist(), values)):
                table = self._as_integers(buffer, table.schema, values)
                if table is None or not all(map(_same_kinds, table.to_pylist(), values)):
                    return None
        return self._frame(table)

    def _as_integers(self, buffer: Any, schema: Any, values: list[object]) -> Any:
        """The lines read again with ``schema``'s float (and ``int64``) fields whose
        values are all integers (in the reference's ``values``) typed to hold them (see
        :func:`_integer_type`), or None."""
        pa = self._pa
        fields = [
            pa.field(f.name, _integer_type(f.type, [_get(v, f.name) for v in values]))
            for f in schema
        ]
        if all(f.type == g.type for f, g in zip(fields, schema, strict=True)):
            return None
        try:
            return self._read_as(buffer, fields, self._lines.unexpected_field_behavior)
        except (pa.ArrowInvalid, ValueError):
            return None

    def _read_as(self, buffer: Any, fields: list[Any], unexpected: str) -> Any:
        """The lines read with ``fields`` as the explicit schema, or None when a column
        is broken. A null type is read as ``bool`` and made null again (the reader
        builds several nulls in a row of an explicit null type as one, B340)."""
        pa = self._pa
        options = self._pj.ParseOptions(
            explicit_schema=pa.schema([pa.field(f.name, _typed_nulls(f.type)) for f in fields]),
            newlines_in_values=False,
            unexpected_field_behavior=unexpected,
        )
        table = self._pj.read_json(
            pa.BufferReader(buffer), read_options=self._read_options, parse_options=options
        )
        if not _valid(table):
            return None
        return pa.table(
            [_as_type(c, f.type) for c, f in zip(table.columns, fields, strict=True)],
            schema=pa.schema(fields),
        )

    def _read(self, buffer: Any) -> Any:
        """The Arrow table of the lines, or None when the reader refuses them or builds
        a broken column even from explicit types.

        With inferred types, a table holding a timestamp (which stays a string) or
        failing validation (an array whose first items are nulls, B340) is read again
        with its own types as the explicit schema."""
        pj = self._pj
        try:
            table = pj.read_json(
                self._pa.BufferReader(buffer),
                read_options=self._read_options,
                parse_options=self._lines,
            )
            if self._declared is None and (
                _has_timestamps(self._pa.struct(table.schema)) or not _valid(table)
            ):
                pa = self._pa
                want = [pa.field(f.name, _no_timestamps(f.type)) for f in table.schema]
                table = self._read_as(buffer, want, "infer")
                if table is None:
                    return None
        except (self._pa.ArrowInvalid, UnicodeDecodeError, ValueError):
            return None
        return table if _valid(table) else None

    def _frame(self, table: Any) -> Any:
        """The records' DataFrame from the table, or None when a record holds a number
        orjson refuses, is nested too deep, holds a null the declared schema cannot
        vouch for, or polars refuses the table (B341)."""
        pa = self._pa
        if _deep(pa.struct(table.schema)):
            return None
        if any(map(_non_finite, table.columns)):
            return None  # NaN, Infinity or a number beyond a double: orjson refuses them
        declared = self._declared
        if declared is not None:
            for name in declared.strict:
                if table.column(name).null_count:
                    return None
        try:
            frame = self._pl.from_arrow(table, rechunk=False)
        except self._pl.exceptions.PolarsError:
            return None  # not vouched for: record by record, each one it refuses alone
        assert isinstance(frame, self._pl.DataFrame)
        return frame

    # -- record by record -------------------------------------------------------------------

    def _by_record(self, payloads: Sequence[bytes | memoryview]) -> DecodedFrames:
        """The reference decides every record; its values are read as columns again."""
        errors: list[tuple[int, DeserError]] = []
        lines: list[bytes] = []
        rows: list[int] = []
        values: list[object] = []
        empty = 0
        reference = self._reference
        dumps = orjson.dumps
        for index, view in enumerate(payloads):
            for value in reference(view):
                if value is NO_RECORD:
                    empty += 1
                    continue
                if isinstance(value, DeserError):
                    errors.append((index, value))
                    continue
                if dataclasses.is_dataclass(value) and not isinstance(value, type):
                    value = dataclasses.asdict(value)
                try:
                    line = dumps(value)
                except TypeError as exc:
                    errors.append((index, _malformed(exc)))
                    continue
                lines.append(line)
                rows.append(index)
                values.append(value)
        frames: list[tuple[str | None, Any]] = []
        self._read_runs(lines, rows, values, frames, errors)
        errors.sort(key=lambda item: item[0])
        return frames, errors, empty

    def _read_runs(
        self,
        lines: list[bytes],
        rows: list[int],
        values: list[object],
        frames: list[tuple[str | None, Any]],
        errors: list[tuple[int, DeserError]],
    ) -> None:
        """Read ``lines`` as one frame; on a refusal, halve the run until each part reads
        (a part of one line that Arrow refuses is a record error, B86)."""
        if not lines:
            return
        frame = self._read_frame(b"\n".join(lines), len(lines), values)
        if frame is not None:
            frame.insert_column(frame.width, self._pl.Series(ROW_COLUMN, rows, self._pl.UInt32))
            frames.append((None, frame))
            return
        if len(lines) == 1:
            errors.append((rows[0], self._refusal(lines[0])))
            return
        half = len(lines) // 2
        self._read_runs(lines[:half], rows[:half], values[:half], frames, errors)
        self._read_runs(lines[half:], rows[half:], values[half:], frames, errors)

    def _refusal(self, line: bytes) -> DeserError:
        """Why Arrow refuses one record the reference accepts."""
        try:
            table = self._pj.read_json(self._pa.BufferReader(line), parse_options=self._lines)
        except Exception as exc:
            return _malformed(exc)
        if any(map(_whole_floats, table.columns)):
            return DeserError(
                "JSON record cannot be read as columns (an integer beyond 2^53 beside "
                "a fraction in one array would be read as an inexact float)",
                DeserErrorKind.MALFORMED,
            )
        if not _valid(table):
            return DeserError(
                "JSON record cannot be read as columns (Arrow builds a broken column for it)",
                DeserErrorKind.MALFORMED,
            )
        return DeserError(
            "JSON record cannot be read as columns (a null the declared schema does not "
            f"allow, nested {DEPTH_LIMIT} levels or more, or a column polars refuses)",
            DeserErrorKind.MALFORMED,
        )
