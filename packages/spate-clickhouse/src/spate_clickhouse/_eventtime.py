"""The oldest event time of a written buffer, from its ``event_time_column`` (B220).

Freshness is measured from the records' timestamps by default (the Kafka message
timestamp, carried by the source batch's ack); ``event_time_column`` measures it from a
column of the rows instead. The buffer holds its values in written form: ``datetime``
objects for ``DateTime``/``DateTime64`` (naive ones are UTC, as clickhouse-connect sends
them), numbers for epoch seconds, or an Arrow timestamp column on the columnar path.
One ``min`` over the column, after the write, on the worker thread.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spate_clickhouse._encoder import ColumnBuffer


def oldest_event_time(buffer: ColumnBuffer, index: int) -> float | None:
    """The smallest value of column ``index`` in ``buffer``, as epoch seconds; None when
    the column has no value this can read."""
    if buffer.frames is not None:
        return _oldest_arrow(buffer.frames, index)
    columns = buffer.pivoted
    if columns is None or index >= len(columns):
        return None
    values = [v for v in columns[index] if v is not None]
    if not values:
        return None
    try:
        oldest = min(values)  # type: ignore[type-var]
    except TypeError:
        return None
    return _seconds(oldest)


def _oldest_arrow(frames: list[object], index: int) -> float | None:
    import pyarrow.compute as pc

    found: float | None = None
    for frame in frames:
        column = frame.column(index)  # type: ignore[attr-defined]
        value = pc.min(column).as_py()
        seconds = None if value is None else _seconds(value)
        if seconds is not None and (found is None or seconds < found):
            found = seconds
    return found


def _seconds(value: object) -> float | None:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
