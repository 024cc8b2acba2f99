"""Columns in: the ClickHouse side of the columnar path (``spate[columnar]``).

:func:`prepare_frame` checks a polars DataFrame against the sink's columns, column by
column: a null into a non-``Nullable`` column, an integer outside its column's range or
a name outside an ``Enum`` is a record error for that row alone (B28), exactly the
values the row path refuses at ``append``. The good rows become an Arrow table in the
sink's column order with types ClickHouse reads (``Utf8View`` → ``LargeUtf8``: ClickHouse
before 26.4 rejects views). :func:`arrow_stream` encodes the sealed batch once as an
Arrow IPC stream for ``INSERT … FORMAT ArrowStream`` (a retry resends the same bytes with
the same dedup token, B9).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, Literal

from spate.errors import ErrorClass, SinkError
from spate.ops._arrow import plain_table as _plain

from spate_clickhouse._coerce import DATETIME64_SECONDS, INT_RANGES
from spate_clickhouse._encoder import Column
from spate_clickhouse._types import ChType, EnumItem

_NOT_TIMES = ("Float32", "Float64", "String", "FixedString")
"""Columns besides the integers whose row coercion refuses dates and times."""


def _enum_names(t: ChType) -> list[str]:
    return [a.name for a in t.args if isinstance(a, EnumItem)]


def prepare_frame(df: Any, columns: Sequence[Column]) -> tuple[Any, list[tuple[int, str]]]:
    """``(arrow table of the good rows, [(position, reason), …])`` for a polars frame.

    Eager Series checks (null counts, min/max) cost nothing per row in the common case;
    a per-row mask is built only for a column that holds a bad value.
    """
    import polars as pl
    import pyarrow as pa

    present = set(df.columns)
    problems: list[tuple[str, Any]] = []
    for column in columns:
        name = column.name
        t = column.type
        if name not in present:
            if not t.nullable:
                raise SinkError(
                    f"the frame has no column {name!r} (columns: {sorted(present)})",
                    ErrorClass.FATAL,
                )
            continue
        u = t.unwrapped()
        series = df.get_column(name)
        if not t.nullable and series.null_count():
            problems.append((f"null into the non-Nullable column {name} ({t})", series.is_null()))
        if u.name in INT_RANGES and series.dtype.is_integer() and series.len():
            lo, hi = INT_RANGES[u.name]
            low, high = series.min(), series.max()
            if (low is not None and low < lo) or (high is not None and high > hi):
                mask = ((series < lo) | (series > hi)).fill_null(False)
                problems.append((f"value out of range for {name} ({t})", mask))
        elif u.name == "DateTime64" and series.dtype.is_integer() and series.len():
            lo, hi = _tick_range(u)
            low, high = series.min(), series.max()
            if (low is not None and low < lo) or (high is not None and high >= hi):
                mask = ((series < lo) | (series >= hi)).fill_null(False)
                problems.append((f"value out of range for {name} ({t})", mask))
        elif u.name in ("String", "FixedString") and (
            series.dtype.is_numeric() or series.dtype == pl.Boolean
        ):
            mask = series.is_not_null()
            if mask.any():  # the row path takes text or bytes only (a JSON number, say)
                problems.append((f"a {series.dtype} is not text for {name} ({t})", mask))
        elif series.dtype.is_temporal() and (
            u.name in INT_RANGES or u.name in _NOT_TIMES
        ):  # the row path refuses a date or time there (an Avro time-millis, say)
            mask = series.is_not_null()
            if mask.any():
                problems.append((f"a {series.dtype} does not fit {name} ({t})", mask))
        elif u.name in ("Enum8", "Enum16") and series.dtype == pl.String:
            names = _enum_names(u)
            mask = (~series.is_in(names)).fill_null(False)
            if mask.any():
                problems.append((f"value not in {name} ({t})", mask))
    bad: list[tuple[int, str]] = []
    if problems:
        any_bad = problems[0][1]
        for _, mask in problems[1:]:
            any_bad = any_bad | mask
        reasons: dict[int, str] = {}
        for reason, mask in problems:
            for position in mask.arg_true().to_list():
                reasons.setdefault(position, reason)
        bad = sorted(reasons.items())
        df = df.filter(~any_bad)
    df = _integer_times(df, columns, present)
    df, maps = _struct_entries(df, columns, present)
    table = df.to_arrow()
    for name in maps:
        table = table.set_column(
            table.schema.get_field_index(name), name, _map_array(table.column(name))
        )
    arrays = []
    for column in columns:
        if column.name in present:
            arrays.append(table.column(column.name))
        else:
            arrays.append(pa.nulls(table.num_rows))
    out = pa.Table.from_arrays(arrays, names=[c.name for c in columns])
    return _plain(out), bad


def _precision(t: ChType) -> int:
    return next((a for a in t.args if isinstance(a, int)), 3)


def _tick_range(t: ChType) -> tuple[int, int]:
    """``[lo, hi)`` of the integer ticks a ``DateTime64(p)`` column takes (as on rows)."""
    per_second = 10 ** _precision(t)
    lo, hi = (s * per_second for s in DATETIME64_SECONDS)
    return max(lo, -(2**63)), min(hi, 2**63)


def _integer_times(df: Any, columns: Sequence[Column], present: set[str]) -> Any:
    """Integer columns bound for ``DateTime64(p)`` (ticks of 10^-p s) and ``DateTime``
    (seconds) as Arrow timestamps of those instants: the row path's reading of an integer
    (B87); ClickHouse would read a bare integer in an Arrow stream as seconds."""
    import polars as pl

    exprs = []
    for column in columns:
        name = column.name
        u = column.type.unwrapped()
        if name not in present or u.name not in ("DateTime", "DateTime64"):
            continue
        if not df.schema[name].is_integer():
            continue
        precision = _precision(u) if u.name == "DateTime64" else 0
        unit: Literal["ms", "us", "ns"]
        unit, scale = ("ms", 3) if precision <= 3 else ("us", 6) if precision <= 6 else ("ns", 9)
        ticks = pl.col(name).cast(pl.Int64) * 10 ** (scale - precision)
        exprs.append(ticks.cast(pl.Datetime(unit, "UTC")).alias(name))
    return df.with_columns(exprs) if exprs else df


def _struct_entries(df: Any, columns: Sequence[Column], present: set[str]) -> tuple[Any, list[str]]:
    """Struct columns bound for ``Map`` columns (a JSON object read as columns) as lists
    of ``{key, value}`` entries, one per field that is not null in the row: the keys the
    row path's dict would have (B87). Returns the frame and the names of the columns
    holding entries (these and lists of entries already, an Avro map, become Arrow
    maps)."""
    import polars as pl

    exprs = []
    names = []
    for column in columns:
        name = column.name
        if name not in present or column.type.unwrapped().name != "Map":
            continue
        dtype = df.schema[name]
        if _entries(dtype):
            names.append(name)  # already entries (an Avro map read as columns)
            continue
        if not isinstance(dtype, pl.Struct) or not dtype.fields:
            continue
        values = [pl.col(name).struct.field(f.name) for f in dtype.fields]
        entries = pl.concat_list(
            [
                pl.struct(pl.lit(f.name).alias("key"), value.alias("value"))
                for f, value in zip(dtype.fields, values, strict=True)
            ]
        ).list.eval(pl.element().filter(pl.element().struct.field("value").is_not_null()))
        exprs.append(entries.alias(name))
        names.append(name)
    if not exprs:
        return df, names
    try:
        return df.with_columns(exprs), names
    except pl.exceptions.PolarsError:  # fields of different types: ClickHouse decides
        return df, [n for n in names if _entries(df.schema[n])]


def _entries(dtype: Any) -> bool:
    """Whether a polars type is a list of ``{key, value}`` structs (a map's entries)."""
    import polars as pl

    return (
        isinstance(dtype, pl.List)
        and isinstance(dtype.inner, pl.Struct)
        and [f.name for f in dtype.inner.fields] == ["key", "value"]
    )


def _map_array(column: Any) -> Any:
    """A list of ``{key, value}`` structs as an Arrow map."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    entries = array.flatten()
    offsets = array.offsets.cast(pa.int32())
    return pa.MapArray.from_arrays(offsets, entries.field("key"), entries.field("value"))


def take_rows(table: Any, rows: Sequence[int]) -> Any:
    """The rows at ``rows`` of an Arrow table (for the per-shard split)."""
    import pyarrow as pa

    return table.take(pa.array(rows, type=pa.int64()))


def arrow_stream(tables: Sequence[Any], compression: str | None = None) -> bytes:
    """One Arrow IPC stream of ``tables`` (same schema) for ``FORMAT ArrowStream``.

    ``compression`` (``"lz4"`` or ``"zstd"``) compresses the stream's buffers (Arrow IPC
    buffer compression, which ClickHouse's Arrow reader decodes); ``None`` leaves them raw.
    """
    import pyarrow as pa

    table = (
        tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
    )
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()
