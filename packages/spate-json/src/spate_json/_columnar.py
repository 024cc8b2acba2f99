"""Columnar JSON decoding: a batch of payloads into polars DataFrames (``spate[columnar]``).

A batch's JSON objects are read at once by Arrow's JSON reader (``pyarrow.json``, C++,
multi-threaded) into Arrow columns, with no Python object per record; the table becomes
one polars DataFrame with a ``__spate_row`` column (each record's index in the batch).
``framing: single`` reads one object per payload, ``framing: ndjson`` one per line.

Exactness (B28, B86). Arrow's reader is more lenient than orjson, the row path's
decoder: it reads two objects on one line as two rows, skips blank lines, takes ``NaN``
and ``Infinity``, and may keep invalid UTF-8. So every record is read wrapped as
``{"v": <record>}`` on a line of its own: a line holding anything but exactly one JSON
value is a parse error, never a shifted row, and a value that is not an object shows as
a ``v`` that is not a struct. The fast path is taken only when the batch is valid UTF-8
and reads back one row per record (a record with a line break in it reads as an error or
as several rows) with every ``v`` an object, no NaN or infinity in any number, and, with
a ``target`` type, nothing the target would complete or refuse (see
:func:`declared_schema`). Otherwise the batch is decoded
record by record with the row path's own deserializer (the reference): its errors are
the row path's errors for the same records, its ``NO_RECORD`` (a blank payload) is no
row, and the values it accepts are written back compactly by orjson and read as columns
again. A value Arrow still cannot take (a value whose JSON type differs from the same
field's in other records of the batch) is split off into a frame of its own; one that
Arrow refuses even alone is a record error for that record.

A batch with a record nested :data:`DEPTH_LIMIT` levels or more also goes to the
reference: orjson refuses documents nested deeper than 1024 levels (Arrow's reader does
not), and a record it accepts that is nested that deep is a record error here, as no
frame holds it.

Strings that look like timestamps stay strings, as on the row path: a field Arrow infers
as a timestamp is read again as a string.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from typing import Any, Union, get_args, get_origin, get_type_hints

import orjson
from spate import NO_RECORD, DeserError, DeserErrorKind

ROW_COLUMN = "__spate_row"
"""The column holding each row's index in its source batch."""
_obj = attrgetter("obj")
_OPEN = b'{"v":'
_CLOSE_OPEN = b'}\n{"v":'

DecodedFrames = tuple[list[tuple[str | None, Any]], list[tuple[int, DeserError]], int]
"""``(frames, errors, empty)``: ``(None, polars DataFrame)`` per frame with a
``__spate_row`` column, ``(batch index, DeserError)`` for each bad record (several for
one ndjson payload with several bad lines), and how many payloads held no record."""

Reference = Callable[[memoryview], list[object]]
"""The row path's decoding of one payload: its records, and ``DeserError`` items."""


def columnar_available() -> bool:
    """Whether the ``columnar`` extra (polars, pyarrow) is importable."""
    try:
        import polars  # noqa: F401
        import pyarrow.json  # noqa: F401
    except ImportError:
        return False
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class DeclaredSchema:
    """The Arrow schema of a ``target`` dataclass, and which fields may hold nulls.

    ``strict`` fields are the ones where a null in the frame cannot be told apart from a
    value the row path refuses or completes (a missing field with a default, an explicit
    ``null`` for a non-optional field): a null there sends the batch to the reference.
    """

    schema: Any
    strict: tuple[str, ...]
    unknown_fields_error: bool


def _arrow_type(tp: Any) -> tuple[Any, bool]:
    """``(Arrow type, optional)`` of a field type; ``ValueError`` when not columnar."""
    import pyarrow as pa

    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        rest = [o for o in get_args(tp) if o is not type(None)]
        if len(rest) != 1:
            raise ValueError(f"unsupported union {tp!r}")
        inner, _ = _arrow_type(rest[0])
        return inner, True
    if tp is bool:
        return pa.bool_(), False
    if tp is int:
        return pa.int64(), False
    if tp is float:
        return pa.float64(), False
    if tp is str:
        return pa.string(), False
    if origin is list or (origin is tuple and get_args(tp)[1:] == (Ellipsis,)):
        inner, optional = _arrow_type(get_args(tp)[0])
        if optional:
            raise ValueError(f"unsupported element type in {tp!r}")
        return pa.list_(inner), False
    raise ValueError(f"field type {tp!r} has no columnar form")


def declared_schema(target: type[Any], *, unknown_fields_error: bool) -> DeclaredSchema | None:
    """The declared schema of a flat ``target`` dataclass (scalars, ``X | None``, lists
    of scalars), or None when a field has no columnar form (the pipeline keeps rows)."""
    import pyarrow as pa

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
        fields.append(pa.field(field.name, arrow))
        if not (optional and field.default is None):
            strict.append(field.name)
    return DeclaredSchema(pa.schema(fields), tuple(strict), unknown_fields_error)


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


def _non_finite(column: Any) -> bool:
    """Whether a column holds a NaN or an infinity at any depth (Arrow reads ``NaN``,
    ``Infinity`` and ``1e400``; orjson refuses them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pending = list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]
    while pending:
        array = pending.pop()
        t = array.type
        if pa.types.is_floating(t):
            if array.null_count < len(array) and not pc.all(pc.is_finite(array)).as_py():
                return True
        elif pa.types.is_struct(t):
            pending.extend(array.flatten())
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            pending.append(array.flatten())
    return False


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
        import polars as pl
        import pyarrow as pa
        import pyarrow.json as pj

        self._pl = pl
        self._pa = pa
        self._pj = pj
        self._reference = reference
        self._ndjson = ndjson
        self._declared = declared
        self._wrapped: Any = None
        # Unknown fields are inferred, not ignored, even when the target ignores them: an
        # "ignore" would also hide a second top-level key after the wrapped record (a
        # payload with trailing text); the frame keeps the declared fields only.
        behaviour = "infer"
        if declared is not None:
            self._wrapped = pa.schema([pa.field("v", pa.struct(declared.schema))])
            if declared.unknown_fields_error:
                behaviour = "error"
        self._lines = pj.ParseOptions(
            explicit_schema=self._wrapped,
            newlines_in_values=False,
            unexpected_field_behavior=behaviour,
        )

    def close(self) -> None:
        """Nothing to release."""

    # -- the whole batch --------------------------------------------------------------------

    def decode(self, payloads: Sequence[memoryview]) -> DecodedFrames:
        """Frames and errors for ``payloads``; called on the pipeline thread, never blocks."""
        datums: list[Any] = list(map(_obj, payloads))
        if set(map(type, datums)) != {bytes} or sum(map(len, datums)) != sum(map(len, payloads)):
            datums = [bytes(v) for v in payloads]  # views that are slices of larger buffers
        if not datums:
            return [], [], 0
        fast = self._fast(datums)
        if fast is not None:
            return [(None, fast)], [], 0
        return self._by_record(payloads)

    def _fast(self, datums: list[bytes]) -> Any:
        """The batch's frame when every record is vouched for, else None."""
        pa = self._pa
        if self._ndjson:
            lines = [d.rstrip(b"\r\n") for d in datums]
            counts = [d.count(b"\n") + 1 for d in lines]
            body = _CLOSE_OPEN.join(d.replace(b"\n", _CLOSE_OPEN) for d in lines)
            records = sum(counts)
        else:
            # A record with a line break in it reads as a parse error or as two rows or
            # more (its first line opens the wrapper, its last closes it): both fail the
            # row count check below, as every record gives at least one row or an error.
            body = _CLOSE_OPEN.join(datums)
            counts = None
            records = len(datums)
        buffer = pa.py_buffer(b"".join((_OPEN, body, b"}")))
        try:
            pa.StringArray.from_buffers(
                1, pa.py_buffer(b"\0\0\0\0" + len(buffer).to_bytes(4, "little")), buffer
            ).validate(full=True)
        except pa.ArrowInvalid:
            return None  # not UTF-8: the reference names the records
        table = self._read(buffer)
        if table is None or table.num_rows != records:
            return None
        frame = self._frame(table)
        if frame is None:
            return None
        if counts is None:
            rows = self._pl.int_range(records, dtype=self._pl.UInt32, eager=True)
        else:
            rows = (
                self._pl.int_range(len(counts), dtype=self._pl.UInt32, eager=True)
                .repeat_by(self._pl.Series(counts, dtype=self._pl.UInt32))
                .explode()
            )
        frame.insert_column(frame.width, rows.alias(ROW_COLUMN))
        return frame

    def _read(self, buffer: Any) -> Any:
        """The Arrow table of wrapped lines, or None when the reader refuses them."""
        pj = self._pj
        try:
            table = pj.read_json(
                self._pa.BufferReader(buffer),
                parse_options=self._lines,
            )
            if self._wrapped is None and _has_timestamps(table.schema.field(0).type):
                options = pj.ParseOptions(
                    explicit_schema=self._pa.schema(
                        [self._pa.field("v", _no_timestamps(table.schema.field(0).type))]
                    ),
                    newlines_in_values=False,
                )
                table = pj.read_json(
                    self._pa.BufferReader(buffer),
                    parse_options=options,
                )
        except (self._pa.ArrowInvalid, UnicodeDecodeError, ValueError):
            return None
        return table

    def _frame(self, table: Any) -> Any:
        """The records' DataFrame from the wrapped table, or None when a record is not an
        object or holds a null the declared schema cannot vouch for."""
        pa = self._pa
        if table.num_columns != 1 or not pa.types.is_struct(table.schema.field(0).type):
            return None
        if _deep(table.schema.field(0).type):
            return None
        column = table.column(0)
        if column.null_count:
            return None  # a line whose value is null
        chunks = column.chunks
        if len(chunks) == 1:
            flat = pa.Table.from_batches([pa.RecordBatch.from_struct_array(chunks[0])])
        else:
            flat = pa.Table.from_batches(
                [pa.RecordBatch.from_struct_array(c) for c in chunks if len(c)]
            )
        if any(map(_non_finite, flat.columns)):
            return None  # NaN, Infinity or a number beyond a double: orjson refuses them
        declared = self._declared
        if declared is not None:
            for name in declared.strict:
                if flat.column(name).null_count:
                    return None
            if flat.num_columns != len(declared.schema):
                flat = flat.select(declared.schema.names)
        frame = self._pl.from_arrow(flat, rechunk=False)
        assert isinstance(frame, self._pl.DataFrame)
        return frame

    # -- record by record -------------------------------------------------------------------

    def _by_record(self, payloads: Sequence[memoryview]) -> DecodedFrames:
        """The reference decides every record; its values are read as columns again."""
        errors: list[tuple[int, DeserError]] = []
        lines: list[bytes] = []
        rows: list[int] = []
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
        frames: list[tuple[str | None, Any]] = []
        self._read_runs(lines, rows, frames, errors)
        errors.sort(key=lambda item: item[0])
        return frames, errors, empty

    def _read_runs(
        self,
        lines: list[bytes],
        rows: list[int],
        frames: list[tuple[str | None, Any]],
        errors: list[tuple[int, DeserError]],
    ) -> None:
        """Read ``lines`` as one frame; on a refusal, halve the run until each part reads
        (a part of one line that Arrow refuses is a record error, B86)."""
        if not lines:
            return
        pa = self._pa
        buffer = pa.py_buffer(b"".join((_OPEN, _CLOSE_OPEN.join(lines), b"}")))
        table = self._read(buffer)
        frame = None if table is None or table.num_rows != len(lines) else self._frame(table)
        if frame is not None:
            frame.insert_column(frame.width, self._pl.Series(ROW_COLUMN, rows, self._pl.UInt32))
            frames.append((None, frame))
            return
        if len(lines) == 1:
            errors.append((rows[0], self._refusal(buffer)))
            return
        half = len(lines) // 2
        self._read_runs(lines[:half], rows[:half], frames, errors)
        self._read_runs(lines[half:], rows[half:], frames, errors)

    def _refusal(self, buffer: Any) -> DeserError:
        """Why Arrow refuses one record the reference accepts."""
        try:
            self._pj.read_json(self._pa.BufferReader(buffer), parse_options=self._lines)
        except Exception as exc:
            return _malformed(exc)
        return DeserError(
            "JSON record cannot be read as columns (a null the declared schema does not "
            f"allow, or nested {DEPTH_LIMIT} levels or more)",
            DeserErrorKind.MALFORMED,
        )
