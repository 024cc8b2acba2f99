"""Rows to written form: the generated per-row function and the columnar batch buffer.

:class:`RowEncoder` compiles, once per sink, a small function (``exec`` of generated source
with the column coercers of :mod:`spate_clickhouse._coerce` bound as globals) that takes a
row — tuple, list, namedtuple, mapping or dataclass — checks every value and returns the
values in written form with an estimate of the row's in-memory size. The common case, a
tuple whose values already have their written form, costs one class test (and for integers
one range test) per column; anything else goes through the column's coercer. The same body
is the ``append`` of :class:`ColumnBuffer`, the pool's ``RowBuffer``, so appending a row is
one Python call. At write time the buffer pivots its rows into columns once (a retry reuses
them).

:meth:`RowEncoder.prepare_rows` checks a whole source batch of rows at once (B95): it
pivots them into columns and checks each column with C-level builtins (the set of value
types, ``min``/``max`` against the column's range, ``None`` in a column that is not
Nullable); a column whose values are not all in written form already is converted value by
value with the column's coercer. Only when a column holds a value its coercer refuses does
the batch go row by row through the generated function, so each bad value is a record
error for its row alone, with the same reason as when the row is appended. The columns are
kept (:class:`RowBlock`) and the seal does not pivot them again.

Upholds B28 (a bad value is a record error naming column, type and value, raised when the
row is appended) and the first-row check of ``validate_schema: full`` (B20).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from operator import attrgetter, is_not, itemgetter
from typing import Any

from spate.errors import ErrorClass, SinkError

from spate_clickhouse._coerce import (
    INT_RANGES,
    BadValue,
    Coercer,
    coercer_for,
    date_bounds,
    datetime_bounds,
)
from spate_clickhouse._types import ChType

_MISSING = object()
NO_FILL = _MISSING
"""A column without a fill: a mapping row must carry its value (unless it is Nullable)."""


@dataclass(frozen=True, slots=True)
class Column:
    """A sink column: its name, its (server or declared) type and, for a column added by
    ``evolve: add_columns``, the value a mapping row without the field is written with."""

    name: str
    type: ChType
    fill: object = _MISSING


def _base_size(t: ChType) -> int:
    """A rough in-memory size of one written value (for batch and budget accounting)."""
    u = t.unwrapped()
    if u.name in INT_RANGES or u.name in ("Date", "Date32", "DateTime", "DateTime64"):
        return 32
    if u.name in ("Float32", "Float64", "Bool", "Enum8", "Enum16"):
        return 24
    if u.name in ("String", "FixedString"):
        return 49
    if u.name == "Decimal":
        return 104
    if u.name == "UUID":
        return 72
    return 160


class ColumnBuffer:
    """The rows of one batch in written form; :meth:`columns` pivots them for the INSERT.

    ``append`` is generated per sink (see :class:`RowEncoder`); the pool calls it on the
    pipeline thread for every row.
    """

    __slots__ = ("_block_rows", "_columns", "_count", "blocks", "frames", "rows")

    encoder: RowEncoder | None = None
    """The encoder whose columns the rows hold (set on each generated buffer type)."""

    def __init__(self) -> None:
        self.rows: list[tuple[object, ...]] = []
        self._columns: list[list[object]] | None = None
        self._count = 0
        self.frames: list[object] | None = None
        """Arrow tables appended by the columnar path (``append_frame``), else None."""
        self.blocks: list[list[object]] | None = None
        """The columns of the checked blocks appended so far (``append_rows``), else None."""
        self._block_rows = 0

    def append(self, row: object) -> int:  # replaced by the generated function
        raise NotImplementedError

    def append_frame(self, table: object) -> int:
        """Add a checked Arrow table (columnar path); return its buffer size in bytes."""
        if self.frames is None:
            self.frames = []
        self.frames.append(table)
        self._count += len(table)  # type: ignore[arg-type]
        return int(table.nbytes)  # type: ignore[attr-defined]

    def append_rows(self, block: RowBlock) -> int:
        """Add a checked block of rows (:meth:`RowEncoder.prepare_rows`); return its size.

        The block's values are added to the buffer's columns at once, while they are still
        in the processor's caches (the block is not used again); the first block's
        columns become the buffer's.
        """
        columns = self.blocks
        if columns is None:
            self.blocks = block.columns
        else:
            for column, values in zip(columns, block.columns, strict=True):
                column += values
        self._block_rows += block.count
        return block.nbytes

    def __len__(self) -> int:
        if self.frames is not None:
            return self._count
        return self._count if self._columns is not None else len(self.rows) + self._block_rows

    @property
    def pivoted(self) -> list[list[object]] | None:
        """The columns :meth:`columns` computed, or None before it was called."""
        return self._columns

    def columns(self, count: int, binary: frozenset[int] = frozenset()) -> list[list[object]]:
        """The values column by column (computed once; a retry reuses them).

        Columns in ``binary`` (String columns that met non-UTF-8 bytes) are sent as bytes.
        Called on a writer thread after the batch is sealed.
        """
        cached = self._columns
        if cached is not None:
            return cached
        rows = self.rows
        blocks = self.blocks
        pivoted: list[list[object]]
        if blocks is not None and not rows:
            pivoted = blocks
        else:
            # one C-level pass per column (zip(*rows) is ~3x slower on wide batches)
            pivoted = [list(map(itemgetter(i), rows)) for i in range(count)]
            for column, values in zip(pivoted, blocks or (), strict=False):
                column += values
        total = len(rows) + self._block_rows
        self.blocks = None
        for i in binary:
            pivoted[i] = [v.encode("utf-8") if isinstance(v, str) else v for v in pivoted[i]]
        self._count = total
        self._columns = pivoted
        self.rows = []
        return pivoted


class RowBlock:
    """Rows checked at once, kept as columns in written form (a ``RowBlock`` of the pool)."""

    __slots__ = ("columns", "count", "nbytes", "sizer")

    def __init__(
        self,
        columns: list[list[object]],
        count: int,
        sizer: Callable[[list[list[object]], int], int],
        nbytes: int | None = None,
    ) -> None:
        self.columns = columns
        self.count = count
        self.sizer = sizer
        self.nbytes = sizer(columns, count) if nbytes is None else nbytes

    def __len__(self) -> int:
        return self.count

    def take(self, positions: Sequence[int]) -> RowBlock:
        return RowBlock(
            [list(map(column.__getitem__, positions)) for column in self.columns],
            len(positions),
            self.sizer,
        )

    def slice(self, start: int, stop: int) -> RowBlock:
        return RowBlock([column[start:stop] for column in self.columns], stop - start, self.sizer)


_not_none = partial(is_not, None)
_TEXT = frozenset(("String", "JSON"))
"""Types whose written form is text: a row's size estimate counts its characters."""
_tzinfo = attrgetter("tzinfo")


class _Unfit(Exception):
    """A column check failed: the batch goes row by row."""


class RowEncoder:
    """Turns rows (tuple, list, namedtuple, mapping or dataclass) into their written form.

    ``encode(row)`` returns ``(values, size)``: the column values in written form and an
    estimate of the row's in-memory size; it raises ``SinkError`` with
    ``ErrorClass.RECORD`` for a value its column cannot take (B28). :meth:`new_buffer`
    gives a :class:`ColumnBuffer` whose ``append`` does the same and keeps the values.
    With ``strict_first`` the first row appended is checked as a whole first and a
    mismatch raises ``ErrorClass.FATAL`` naming every offending column
    (``validate_schema: full``, B20).
    """

    def __init__(self, columns: Sequence[Column], *, strict_first: bool = False) -> None:
        self.columns = tuple(columns)
        self._binary: dict[int, list[bool]] = {}
        encode, append, converters = _compile(self.columns, self._binary)
        self._checks = [
            _column_check(column, convert)
            for column, convert in zip(self.columns, converters, strict=True)
        ]
        self._sizer = _block_sizer(self.columns)
        self._base = _row_base(self.columns)
        self.encode: Callable[[object], tuple[tuple[object, ...], int]] = encode
        self._buffer_type: type[ColumnBuffer] = type(
            "ClickHouseColumnBuffer",
            (ColumnBuffer,),
            {"__slots__": (), "append": append, "encoder": self},
        )
        self._first_pending = strict_first
        encoder = self

        def first_append(buffer: ColumnBuffer, row: object) -> int:
            encoder.check_first(row)
            buffer.__class__ = encoder._buffer_type
            return append(buffer, row)

        self._first_type: type[ColumnBuffer] = type(
            "ClickHouseFirstRowBuffer",
            (ColumnBuffer,),
            {"__slots__": (), "append": first_append, "encoder": self},
        )

    def new_buffer(self) -> ColumnBuffer:
        """An empty buffer (the first one checks its first row when ``strict_first``)."""
        if self._first_pending:
            self._first_pending = False
            return self._first_type()
        return self._buffer_type()

    def prepare_rows(self, rows: list[Any]) -> tuple[RowBlock, list[tuple[int, Exception]]]:
        """Check a batch of rows at once (see the module docstring); ``(block, refused)``
        with ``(position, SinkError)`` for each row a per-row append would refuse.

        With ``strict_first`` still pending, the first row is checked as a whole first
        (a mismatch raises a fatal ``SinkError``, B20).
        """
        if self._first_pending and rows:
            self._first_pending = False
            self.check_first(rows[0])
        count = len(self.columns)
        n = len(rows)
        try:
            kinds = set(map(type, rows))
            if kinds <= _SEQUENCES and set(map(len, rows)) == {count}:
                pivot = [list(map(itemgetter(i), rows)) for i in range(count)]
            elif kinds == _DICT:
                pivot = [list(map(itemgetter(c.name), rows)) for c in self.columns]
            else:
                raise _Unfit
            checked = [check(values) for check, values in zip(self._checks, pivot, strict=True)]
        except Exception:  # _Unfit, a missing key, a value a coercer refuses
            return self._prepare_each(rows)
        columns = [values for values, _ in checked]
        nbytes = self._base * n + sum(size for _, size in checked)
        return RowBlock(columns, n, self._sizer, nbytes), []

    def _prepare_each(self, rows: list[object]) -> tuple[RowBlock, list[tuple[int, Exception]]]:
        """Row by row through the generated function (a column check failed)."""
        encode = self.encode
        good: list[tuple[object, ...]] = []
        refused: list[tuple[int, Exception]] = []
        for position, row in enumerate(rows):
            try:
                good.append(encode(row)[0])
            except Exception as exc:
                refused.append((position, exc))
        count = len(self.columns)
        columns = [list(map(itemgetter(i), good)) for i in range(count)]
        return RowBlock(columns, len(good), self._sizer), refused

    def binary_columns(self) -> frozenset[int]:
        """Indexes of the String columns that met bytes that are not UTF-8."""
        return frozenset(i for i, seen in self._binary.items() if seen[0])

    def check_first(self, row: object) -> None:
        """Check a row as a whole; raise a fatal ``SinkError`` naming every bad column."""
        problems: list[str] = []
        try:
            if isinstance(row, (tuple, list)) and not hasattr(row, "_fields"):
                values = _values_of(row, self.columns) if len(row) != len(self.columns) else row
            else:
                values = _values_of(row, self.columns)
        except SinkError as exc:
            raise SinkError(
                f"the first row does not fit the sink's columns: {exc.reason}", ErrorClass.FATAL
            ) from None
        for column, value in zip(self.columns, tuple(values), strict=True):
            try:
                coercer_for(column.type, [False])(value)
            except BadValue as exc:
                problems.append(f"{column.name} ({column.type}): {exc}")
        if problems:
            raise SinkError(
                "the first row does not fit the table's column types: " + "; ".join(problems),
                ErrorClass.FATAL,
            )


def _values_of(row: object, columns: Sequence[Column]) -> tuple[object, ...]:
    """The column values of a row that is not a plain tuple/list of the right length."""
    names = [c.name for c in columns]
    if isinstance(row, tuple) and hasattr(row, "_fields"):
        row = dict(zip(row._fields, row, strict=True))
    elif dataclasses.is_dataclass(row) and not isinstance(row, type):
        row = {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
    if isinstance(row, Mapping):
        values: list[object] = []
        for column in columns:
            value = row.get(column.name, _MISSING)
            if value is _MISSING:
                if column.fill is not _MISSING:
                    value = column.fill
                elif not column.type.nullable:
                    raise SinkError(
                        f"the row has no value for column {column.name} (have: "
                        f"{', '.join(sorted(map(str, row)))[:200]})",
                        ErrorClass.RECORD,
                    )
                else:
                    value = None
            values.append(value)
        return tuple(values)
    if isinstance(row, (tuple, list)):
        raise SinkError(
            f"the row has {len(row)} values but the sink has {len(names)} columns "
            f"({', '.join(names)})",
            ErrorClass.RECORD,
        )
    raise SinkError(
        f"a row must be a tuple, list, mapping or dataclass, got {type(row).__name__}",
        ErrorClass.RECORD,
    )


def _record_error(column: Column, exc: BadValue) -> SinkError:
    return SinkError(f"column {column.name} ({column.type}): {exc}", ErrorClass.RECORD)


def _named(coercer: Coercer, column: Column) -> Coercer:
    def coerce(value: object) -> object:
        try:
            return coercer(value)
        except BadValue as exc:
            raise _record_error(column, exc) from None

    return coerce


def _fast_condition(v: str, u: ChType, i: int, env: dict[str, object]) -> str | None:
    """Source of a test that ``v`` already has its written form (None: always coerce)."""
    if u.name in INT_RANGES:
        env[f"lo{i}"], env[f"hi{i}"] = INT_RANGES[u.name]
        return f"{v}.__class__ is int and lo{i} <= {v} <= hi{i}"
    if u.name == "Float64":
        return f"{v}.__class__ is float"
    if u.name == "String":
        return f"{v}.__class__ is str"
    if u.name == "Bool":
        return f"({v} is True or {v} is False)"
    if u.name in ("Date", "Date32"):
        env[f"lo{i}"], env[f"hi{i}"] = date_bounds(u.name)
        return f"{v}.__class__ is _date and lo{i} <= {v} <= hi{i}"
    if u.name == "DateTime" or (u.name == "DateTime64" and _precision(u) <= 6):
        env[f"lo{i}"], env[f"hi{i}"] = datetime_bounds(u.name)
        return f"{v}.__class__ is _datetime and {v}.tzinfo is not None and lo{i} <= {v} <= hi{i}"
    return None


def _precision(t: ChType) -> int:
    return next((a for a in t.args if isinstance(a, int)), 3)


def _compile(
    columns: Sequence[Column], binary: dict[int, list[bool]]
) -> tuple[
    Callable[[object], tuple[tuple[object, ...], int]],
    Callable[[ColumnBuffer, object], int],
    list[Callable[[list[object]], list[object]]],
]:
    count = len(columns)
    names = [f"v{i}" for i in range(count)]
    env: dict[str, object] = {
        "_values_of": _values_of,
        "_columns": tuple(columns),
        "_date": dt.date,
        "_datetime": dt.datetime,
    }
    base = _row_base(columns)
    lines = [
        "",
        "    cls = row.__class__",
        f"    if (cls is tuple or cls is list) and len(row) == {count}:",
        f"        {', '.join(names)}{',' if count == 1 else ''} = row",
        "    else:",
        f"        {', '.join(names)}{',' if count == 1 else ''} = _values_of(row, _columns)",
    ]
    sizes: list[str] = []
    oks: list[str | None] = []
    for i, column in enumerate(columns):
        v = names[i]
        t = column.type
        u = t.unwrapped()
        nullable = t.nullable
        seen: list[bool] | None = None
        if u.name == "String":
            seen = binary.setdefault(i, [False])
        if u.name in _TEXT:
            sizes.append(f"len({v})" if not nullable else f"(len({v}) if {v} is not None else 0)")
        env[f"c{i}"] = _named(coercer_for(t, seen), column)
        ok = _fast_condition(v, u, i, env)
        if ok is None:
            oks.append(None)
            guard = f"{v} is not None" if nullable else "True"
            lines.append(f"    if {guard}: {v} = c{i}({v})")
        else:
            if nullable:
                ok = f"({v} is None or {ok})"
            oks.append(ok)
            lines.append(f"    if not ({ok}): {v} = c{i}({v})")
    size_expr = " + ".join([str(base), *sizes])
    values = f"({', '.join(names)}{',' if count == 1 else ''})"
    body = lines[1:]
    encode_src = ["def encode(row):", *body, f"    return {values}, {size_expr}"]
    append_src = ["def append(self, row):"]
    if all(ok is not None for ok in oks):
        # A tuple whose values all have their written form already is kept as it is.
        unpack = f"{', '.join(names)}{',' if count == 1 else ''}"
        append_src += [
            f"    if row.__class__ is tuple and len(row) == {count}:",
            f"        {unpack} = row",
            f"        if {' and '.join(f'({ok})' for ok in oks)}:",
            "            self.rows.append(row)",
            f"            return {size_expr}",
        ]
    append_src += [*body, f"    self.rows.append({values})", f"    return {size_expr}"]
    converters_src: list[str] = []
    for i, column in enumerate(columns):
        ok = _fast_condition("x", column.type.unwrapped(), i, env)
        if ok is None:
            keep = "x is None" if column.type.nullable else None
        else:
            keep = f"x is None or {ok}" if column.type.nullable else ok
        if keep is None:
            converters_src.append(f"def convert{i}(column): return list(map(c{i}, column))")
        else:
            converters_src.append(
                f"def convert{i}(column): return [x if ({keep}) else c{i}(x) for x in column]"
            )
    source = "\n".join([*encode_src, "", *append_src, "", *converters_src, ""])
    code = compile(source, "<spate_clickhouse row encoder>", "exec")
    exec(code, env)
    converters = [env[f"convert{i}"] for i in range(count)]
    return env["encode"], env["append"], converters  # type: ignore[return-value]


_SEQUENCES = frozenset((tuple, list))
_DICT = {dict}


_ARRAY_CODES = {
    name: code
    for name, code, width in (
        ("Int8", "b", 1),
        ("UInt8", "B", 1),
        ("Int16", "h", 2),
        ("UInt16", "H", 2),
        ("Int32", "i", 4),
        ("UInt32", "I", 4),
        ("Int64", "q", 8),
        ("UInt64", "Q", 8),
    )
    if array(code).itemsize == width
}
"""Integer columns whose range is exactly a C type's: ``array(code, values)`` checks the
types and the range in one C-level pass (it takes what ``operator.index`` takes)."""

ColumnCheck = Callable[[list[Any]], tuple[list[Any], int]]
"""Checks one column's values at once: ``(values in written form, characters of text)``."""


def _column_check(column: Column, convert: Callable[[list[Any]], list[Any]]) -> ColumnCheck:
    """The check of one column (see :meth:`RowEncoder.prepare_rows`).

    When every value already fits, the values are kept as they are, C-level passes
    only: ``array(code, …)`` for integers (type and range at once), ``"".join`` for text
    (which also gives the characters the size estimate counts), the first value's type
    and time zone then ``min``/``max`` for dates and times (a naive time among aware
    ones, or a date among times, makes the comparison raise), the set of value types
    otherwise. Else ``convert`` runs the column's coercer value by value, as ``append``
    does, and raises ``SinkError`` at a value that does not fit.
    """
    t = column.type
    u = t.unwrapped()
    nullable = t.nullable
    name = u.name
    text = name == "String"

    def converted(values: list[Any]) -> tuple[list[Any], int]:
        out = convert(values)
        if name not in _TEXT:
            return out, 0
        return out, sum(map(len, filter(_not_none, out) if nullable else out))

    if name == "JSON":  # every value is checked and written as its text
        return converted

    fits: Callable[[list[Any]], int | None]
    if name in _ARRAY_CODES:
        code = _ARRAY_CODES[name]

        def fits(present: list[Any]) -> int | None:
            try:
                array(code, present)
            except (TypeError, OverflowError):
                return None
            return 0

    elif text:

        def fits(present: list[Any]) -> int | None:
            try:
                return len("".join(present))
            except TypeError:
                return None

    elif (
        name in ("Date", "Date32")
        or name == "DateTime"
        or (name == "DateTime64" and _precision(u) <= 6)
    ):
        moment = name.startswith("DateTime")
        first_type: type = dt.datetime if moment else dt.date
        bounds: tuple[Any, Any] = datetime_bounds(name) if moment else date_bounds(name)
        lo, hi = bounds

        def fits(present: list[Any]) -> int | None:
            first: Any = present[0]
            if first.__class__ is not first_type or (moment and _tzinfo(first) is None):
                return None
            try:
                return 0 if lo <= min(present) and max(present) <= hi else None
            except TypeError:
                return None

    else:
        types: frozenset[type]
        lo_hi: tuple[Any, Any] | None = INT_RANGES.get(name)
        if lo_hi is not None:
            types = frozenset((int,))
        elif name == "Float64":
            types = frozenset((float,))
        elif name == "Bool":
            types = frozenset((bool,))
        else:
            return lambda values: (convert(values), 0)

        def fits(present: list[Any]) -> int | None:
            if not set(map(type, present)) <= types:
                return None
            if lo_hi is not None and not (lo_hi[0] <= min(present) and max(present) <= lo_hi[1]):
                return None
            return 0

    def check(values: list[Any]) -> tuple[list[Any], int]:
        present = values
        if nullable and None in values:
            present = list(filter(_not_none, values))
            if not present:
                return values, 0
        elif not values:
            return values, 0
        size = fits(present)
        if size is None:
            return converted(values)
        return values, size

    return check


def _row_base(columns: Sequence[Column]) -> int:
    """The size estimate of a row without its text (as ``append`` counts)."""
    return 56 + 8 * len(columns) + sum(_base_size(c.type) for c in columns)


def _block_sizer(columns: Sequence[Column]) -> Callable[[list[list[object]], int], int]:
    """The sum of the per-row size estimates of a block's rows (as ``append`` counts)."""
    base = _row_base(columns)
    strings = [
        (i, c.type.nullable) for i, c in enumerate(columns) if c.type.unwrapped().name in _TEXT
    ]

    def size(values: list[list[object]], count: int) -> int:
        total = base * count
        for i, nullable in strings:
            column = values[i]
            total += sum(map(len, filter(_not_none, column) if nullable else column))  # type: ignore[arg-type]
        return total

    return size
