"""Columns in: the Parquet side of the columnar path (``spate[columnar]``).

:func:`prepare_frame` turns a polars DataFrame from the frame executor into an Arrow
table in the declared schema, column by column: a value a column cannot take is a
record error for that row alone (B28), like the row path's refusal at ``offer``. The
``__spate_row`` column (each row's record index in its source batch) is kept, last,
so the sink places every row at its exact source position. :func:`runs` cuts a table
into runs of consecutive rows that share a window key (time bucket, partition values)
without a Python loop over rows; the sink feeds each run through the same window logic
as single rows, so files are cut where the input says (B50).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from spate.errors import ErrorClass, SinkError
from spate.ops import plain_column
from spate.records import ROW_COLUMN

_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def prepare_frame(frame: Any, schema: pa.Schema | None) -> tuple[pa.Table, list[tuple[int, str]]]:
    """``(arrow table of the good rows, [(position, reason), …])`` for a polars frame."""
    table: pa.Table = frame if isinstance(frame, pa.Table) else frame.to_arrow()
    if ROW_COLUMN not in table.column_names:
        raise SinkError(f"the frame has no {ROW_COLUMN} column", ErrorClass.FATAL)
    rows = table.column(ROW_COLUMN)
    if schema is None:
        names = [n for n in table.column_names if n != ROW_COLUMN]
        arrays = [plain_column(table.column(n)) for n in names]
        return pa.Table.from_arrays([*arrays, rows], names=[*names, ROW_COLUMN]), []
    arrays = []
    bad: dict[int, str] = {}
    for name in table.column_names:
        if name != ROW_COLUMN and name not in schema.names:
            # As on the row path, a value in a column the schema does not declare is
            # refused; a null there (a field the record left out) is no value at all.
            present = pc.invert(pc.is_null(table.column(name)))
            for position in pc.indices_nonzero(present).to_pylist():
                bad.setdefault(position, f"column {name!r} is not in the schema")
    for field in schema:
        if field.name not in table.column_names:
            arrays.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        try:
            arrays.append(column.cast(field.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            arrays.append(_cast_each(column, field, bad))
    out = pa.Table.from_arrays([*arrays, rows], names=[*schema.names, ROW_COLUMN])
    if not bad:
        return out, []
    keep = pa.array([i not in bad for i in range(out.num_rows)])
    return out.filter(keep), sorted(bad.items())


def _cast_each(column: pa.ChunkedArray, field: pa.Field, bad: dict[int, str]) -> pa.Array:
    """The slow path for a column holding a bad value: cast value by value."""
    values = []
    for position, value in enumerate(column.to_pylist()):
        try:
            pa.array([value]).cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            bad.setdefault(
                position, f"column {field.name!r}: value {value!r} does not fit {field.type}"
            )
            value = None
        values.append(value)
    return pa.array(values).cast(field.type, safe=False)


def seconds(column: pa.ChunkedArray, name: str) -> pa.ChunkedArray:
    """A time column as epoch seconds (float64): timestamps, or integers as epoch ms."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        raw = column.cast(pa.int64())
        return pc.divide(raw.cast(pa.float64()), float(_UNITS[kind.unit]))
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return pc.divide(column.cast(pa.float64()), 1000.0)
    raise SinkError(
        f"time column {name!r} must be a timestamp or epoch milliseconds, got {kind}",
        ErrorClass.RECORD,
    )


def runs(keys: Sequence[pa.ChunkedArray], count: int) -> list[tuple[int, int]]:
    """``[(start, stop), …]``: maximal runs of rows whose ``keys`` are all equal."""
    if not keys or count <= 1:
        return [(0, count)] if count else []
    changed = None
    for key in keys:
        array = key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key
        head, tail = array.slice(0, count - 1), array.slice(1)
        differs = pc.fill_null(pc.not_equal(head, tail), True)
        same_null = pc.and_(pc.is_null(head), pc.is_null(tail))
        differs = pc.and_not(differs, same_null)
        changed = differs if changed is None else pc.or_(changed, differs)
    starts = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist())]
    return list(zip(starts, [*starts[1:], count], strict=True))
