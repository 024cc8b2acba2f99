"""Columns in: the ClickHouse side of the columnar path (``spate[columnar]``).

:func:`prepare_frame` checks a polars DataFrame against the sink's columns, column by
column, with the row path's rules (:mod:`spate_clickhouse._arrowvalues`): a value the
row path refuses at ``append`` is a record error for that row alone (B28), and a value
it takes is sent in the Arrow type ClickHouse stores as the row path's value (B87). The
good rows become an Arrow table in the sink's column order (``Utf8View`` → ``LargeUtf8``:
ClickHouse before 26.4 rejects views). :func:`arrow_stream` encodes the sealed batch once as an
Arrow IPC stream for ``INSERT … FORMAT ArrowStream`` (a retry resends the same bytes with
the same dedup token, B9).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

from spate.errors import ErrorClass, SinkError
from spate.ops import plain_column
from spate.ops import plain_table as _plain

from spate_clickhouse._arrowvalues import arrow_type, convert_column
from spate_clickhouse._encoder import Column


def prepare_frame(
    df: Any,
    columns: Sequence[Column],
    route: Callable[[Any], list[tuple[int, str]]] | None = None,
) -> tuple[Any, list[tuple[int, str]]]:
    """``(arrow table of the good rows, [(position, reason), …])`` for a polars frame.

    ``route`` (a templated sink's :meth:`~spate_clickhouse._targets.TargetPlan.refused`)
    names the rows of the converted table that have no target (B292, B296).

    Each column is converted to the Arrow type its ClickHouse column is sent in and
    checked with Arrow kernels (:func:`spate_clickhouse._arrowvalues.convert_column`):
    the row path's coercer decides only the rows a kernel flags, so a value it refuses
    is a record error for its row alone (with its reason) and one it accepts is stored
    as on the row path (B28, B87).
    """
    import pyarrow as pa

    present = set(df.columns)
    for column in columns:
        if column.name not in present and not column.type.nullable:
            raise SinkError(
                f"the frame has no column {column.name!r} (columns: {sorted(present)})",
                ErrorClass.FATAL,
            )
    df, _ = _struct_entries(df, columns, present)
    arrays = []
    reasons: dict[int, str] = {}
    for column in columns:
        name = column.name
        if name not in present:
            target = arrow_type(column.type)
            arrays.append(pa.nulls(df.height, target if target is not None else pa.null()))
            continue
        array = df.get_column(name).to_arrow()
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        converted, bad = convert_column(plain_column(array), column.type)
        arrays.append(converted)
        for position, reason in bad:
            reasons.setdefault(position, f"column {name} ({column.type}): {reason}")
    out = pa.Table.from_arrays(arrays, names=[c.name for c in columns])
    if route is not None:
        for position, reason in route(out):
            reasons.setdefault(position, reason)
    if reasons:
        import polars as pl

        keep = pl.repeat(True, out.num_rows, eager=True).scatter(list(reasons), False)
        out = out.filter(keep.to_arrow())
    return _plain(out), sorted(reasons.items())


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
        exprs.append(pl.when(pl.col(name).is_not_null()).then(entries).alias(name))
        names.append(name)
    if not exprs:
        return df, names
    try:
        out = df.with_columns(exprs)
    except pl.exceptions.PolarsError:  # fields of different types: the row path decides
        return df, [n for n in names if _entries(df.schema[n])]
    if any(_wider_than_arrow(out.schema[n]) for n in names):
        # Int64 and UInt64 fields make Int128 values, which Arrow has no type for
        return df, [n for n in names if _entries(df.schema[n])]
    return out, names


def _wider_than_arrow(dtype: Any) -> bool:
    """Whether a polars type holds 128-bit integers at any depth."""
    import polars as pl

    if dtype == pl.Int128 or str(dtype) == "UInt128":
        return True
    if isinstance(dtype, (pl.List, pl.Array)):
        return _wider_than_arrow(dtype.inner)
    if isinstance(dtype, pl.Struct):
        return any(_wider_than_arrow(f.dtype) for f in dtype.fields)
    return False


def _entries(dtype: Any) -> bool:
    """Whether a polars type is a list of ``{key, value}`` structs (a map's entries)."""
    import polars as pl

    return (
        isinstance(dtype, pl.List)
        and isinstance(dtype.inner, pl.Struct)
        and [f.name for f in dtype.inner.fields] == ["key", "value"]
    )


def take_rows(table: Any, rows: Sequence[int]) -> Any:
    """The rows at ``rows`` of an Arrow table (for the per-shard split)."""
    import pyarrow as pa

    return table.take(pa.array(rows, type=pa.int64()))


def arrow_stream(tables: Sequence[Any], compression: str | None = None) -> bytes:
    """One Arrow IPC stream of ``tables`` (same schema) for ``FORMAT ArrowStream``, as
    one record batch.

    ``compression`` (``"lz4"`` or ``"zstd"``) compresses the stream's buffers (Arrow IPC
    buffer compression, which ClickHouse's Arrow reader decodes); ``None`` leaves them raw.
    """
    import pyarrow as pa

    table = tables[0] if len(tables) == 1 else concat_tables(tables)
    # One record batch whatever frames the block was built from: ClickHouse makes a
    # block of each, and the dedup token names the blocks, so a replayed block cut from
    # other source batches must reach it in the same blocks (B165).
    table = table.combine_chunks()
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def read_stream(data: bytes) -> Any:
    """The table an Arrow IPC stream of :func:`arrow_stream` holds (to cut sub-blocks)."""
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all()


def concat_tables(tables: Sequence[Any]) -> Any:
    """The tables as one, their column types made one (B87).

    Prepared tables carry their columns' Arrow types, so they differ only where a
    ``String`` column holds bytes that are not UTF-8 in some of them (sent as bytes, as
    the row path sends such a column) or in a column's nullability: such columns are
    made large binary, which ClickHouse stores as the same bytes.
    """
    import pyarrow as pa

    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        pass
    first = tables[0].schema
    changed = [
        i
        for i, field in enumerate(first)
        if any(not t.schema.field(i).type.equals(field.type) for t in tables[1:])
    ]
    fixed = []
    for table in tables:
        for i in changed:
            column = table.column(i)
            table = table.set_column(i, table.schema.field(i).name, column.cast(pa.large_binary()))
        fixed.append(table)
    return pa.concat_tables(fixed, promote_options="permissive")
