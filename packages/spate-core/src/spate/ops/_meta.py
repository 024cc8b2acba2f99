"""Record metadata into a sink's rows: the columns a sink fills from each row's record.

A :class:`~spate.sink.MetaColumnsSink` names columns that come from the record a row was
made from — its offset, partition, timestamp, topic, key, value or a header
(:class:`~spate.records.MetaSource`) — rather than from the row (B252, ADR 0020). The
chain adds them in one place, :class:`RowMeta`, whichever way the rows reach the sink:

* row by row (``offer``): the sink's offer is wrapped, reading the record from the
  chain's :class:`~spate.sink._held.RecordCell` (set per record); the row the chain keeps
  for a stall is the row before the columns are added, so a resumed offer adds the same
  values again, once;
* a batch's rows at once (B95): :meth:`RowMeta.rows` adds them to the collected rows from
  their record indexes, one list per column;
* a frame (the columnar path): :meth:`RowMeta.frame` adds them as columns, from the
  frame's ``__spate_row`` column (B256); a frame whose operators dropped that column
  cannot have them (a fatal error naming the sink).

The values depend only on the record, so a replay writes the same rows (effectively
once, B89) and a dead letter carries its record as read. Nothing here reads a field no
metadata column asks for (the batch builds its header list only when a header is
asked for, B251). Owns no policy: a row of a shape that cannot take columns is a record
error for its record (``SinkError(RECORD)``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spate.checkpoint._ack import AckToken
from spate.errors import ErrorClass, FatalError, SinkError
from spate.records import ROW_COLUMN, Headers, Lane, MetaColumn, MetaSource, PayloadBatch
from spate.sink._contract import MetaColumnsSink, Offer, Sink
from spate.sink._held import RecordCell

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

OfferFn = Callable[[object, bytes | None, Lane, AckToken], Offer]


def meta_values(source: MetaSource, batch: PayloadBatch, records: Sequence[int]) -> list[Any]:
    """The values of ``source`` for records ``records`` of ``batch``, in that order."""
    kind = source.kind
    at: Callable[[int], Any]
    if kind == "offset":
        at = batch.offsets.__getitem__
    elif kind == "partition":
        return [batch.lane.partition] * len(records)
    elif kind == "topic":
        return [batch.lane.stream] * len(records)
    elif kind == "key":
        at = batch.keys.__getitem__
    elif kind == "timestamp_ms":
        at = batch.timestamps.__getitem__
    elif kind == "timestamp":
        timestamps = batch.timestamps
        return [_EPOCH + dt.timedelta(milliseconds=timestamps[i]) for i in records]
    elif kind == "value":
        values = batch.values
        if values is not None:
            at = values.__getitem__
        else:
            payloads = batch.payloads
            return [bytes(payloads[i]) for i in records]
    else:
        return header_values(batch.headers, source.header, records)
    return list(map(at, records))


def header_values(headers: list[Headers], name: str, records: Sequence[int]) -> list[Any]:
    """The last value of header ``name`` of each record (None where it has none)."""
    return [headers[i].get(name) for i in records]


class RowMeta:
    """Adds one sink's metadata columns to its rows (see the module docstring)."""

    __slots__ = ("_cell", "_columns", "_names", "_positions")

    def __init__(self, columns: Sequence[MetaColumn], cell: RecordCell) -> None:
        ordered = sorted(columns, key=lambda c: c.position)
        self._columns = tuple(ordered)
        self._names = tuple(c.name for c in ordered)
        self._positions = tuple(c.position for c in ordered)
        self._cell = cell

    def rows(self, rows: list[object], records: Sequence[int], batch: PayloadBatch) -> list[object]:
        """``rows`` (from records ``records`` of ``batch``) with the columns added (B95).

        A row of a shape that cannot take them is left as it is: the sink's own check
        refuses it as a record error for its record alone.
        """
        columns = [meta_values(c.source, batch, records) for c in self._columns]
        add = self._add
        out: list[object] = []
        for row, values in zip(rows, zip(*columns, strict=True), strict=True):
            try:
                out.append(add(row, values))
            except SinkError:
                out.append(row)
        return out

    def one(self, row: object, batch: PayloadBatch, index: int) -> object:
        """``row`` of record ``index`` of ``batch`` with the columns added."""
        values = tuple(meta_values(c.source, batch, (index,))[0] for c in self._columns)
        return self._add(row, values)

    def frame(self, df: Any, batch: PayloadBatch, sink: str) -> Any:
        """The polars frame ``df`` (rows of ``batch``) with the columns added (B256):
        integers as ``Int64`` (``partition``: ``Int32``), ``timestamp`` as ``Datetime``
        in milliseconds (UTC), ``topic`` as text and the bytes as ``Binary``."""
        import polars as pl

        if ROW_COLUMN not in df.columns:
            raise FatalError(
                f"sink {sink}",
                f"the frame operators dropped {ROW_COLUMN}, so the metadata columns "
                f"{', '.join(self._names)} cannot be filled; keep it in the frame",
            )
        records = df.get_column(ROW_COLUMN).to_list()
        types = {
            "offset": pl.Int64,
            "partition": pl.Int32,
            "timestamp_ms": pl.Int64,
            "topic": pl.Utf8,
            "key": pl.Binary,
            "value": pl.Binary,
            "header": pl.Binary,
        }
        series = []
        for column in self._columns:
            kind = column.source.kind
            if kind == "timestamp":
                ms = meta_values(MetaSource("timestamp_ms"), batch, records)
                series.append(
                    pl.Series(column.name, ms, dtype=pl.Int64)
                    .cast(pl.Datetime("ms"))
                    .dt.replace_time_zone("UTC")
                )
                continue
            values = meta_values(column.source, batch, records)
            series.append(pl.Series(column.name, values, dtype=types[kind]))
        return df.with_columns(series)

    def wrap(self, offer: OfferFn) -> OfferFn:
        """``offer`` adding the columns of the record the chain is at (its cell)."""
        cell = self._cell
        one = self.one

        def offer_with_meta(row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
            batch = cell.batch
            if batch is None:
                raise SinkError("a row reached the sink outside a record", ErrorClass.FATAL)
            return offer(one(row, batch, cell.index), key, lane, ack)

        return offer_with_meta

    def _add(self, row: object, values: tuple[Any, ...]) -> object:
        if type(row) is dict:
            out = row.copy()
            out.update(zip(self._names, values, strict=True))
            return out
        if isinstance(row, tuple) and hasattr(row, "_asdict"):
            mapped: dict[str, object] = row._asdict()
            mapped.update(zip(self._names, values, strict=True))
            return mapped
        if isinstance(row, Mapping):
            mapped = dict(row)
            mapped.update(zip(self._names, values, strict=True))
            return mapped
        if isinstance(row, tuple | list):
            items = list(row)
            for position, value in zip(self._positions, values, strict=True):
                items.insert(position, value)
            return tuple(items)
        if dataclasses.is_dataclass(row) and not isinstance(row, type):
            mapped = {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
            mapped.update(zip(self._names, values, strict=True))
            return mapped
        raise SinkError(
            f"a row must be a tuple, list, mapping or dataclass to take the metadata columns "
            f"{', '.join(self._names)}, got {type(row).__name__}",
            ErrorClass.RECORD,
        )


def row_meta(sink: Sink, cell: RecordCell) -> RowMeta | None:
    """The sink's :class:`RowMeta` when it asks for metadata columns, else None."""
    if isinstance(sink, MetaColumnsSink) and sink.meta_columns:
        return RowMeta(sink.meta_columns, cell)
    return None
