"""The columnar executor: one source batch → frames → frame operators → sinks, as columns.

:class:`FrameProcessor` is a :class:`~spate.ops.BatchProcessor` like the fused row loop,
so the runtime, tracker, flow control, sink pool, drain and metrics are the same: a
source batch stays one batch with one ack. Per batch it

1. asks the deserializer for ``deserialize_batch(payloads)`` → ``(frames, errors)``
   or ``(frames, errors, empty)``: polars DataFrames (one per union branch, ``None``
   for a plain record schema; several may share a branch), each with the
   ``__spate_row`` column (the record's index in the batch), the bad records by index,
   and how many payloads held no record (an empty JSON payload: counted as ``empty``).
   A ``NOT_READY`` error stalls the whole batch before anything is offered (B21); the
   others follow the deserializer's policy and are counted exactly as on the row path
   (:class:`~spate.ops._stage.ChainRuntime` does the counting, B28). As on the row
   path, a deserializer with ``takes_bytes`` is given the batch's whole ``bytes``
   values when it has them (Kafka), with no view made per record, and views otherwise
   (B97);
2. runs the chain's frame operators, then each route's selection and operators; rows a
   filter drops, or that no route takes (``unrouted: skip``), are counted and resolve
   as delivered (B3);
3. adds the columns a sink fills from the records' metadata (B256,
   :mod:`spate.ops._meta`), then has each sink check the frame per column
   (``sink.prepare_frame``): values a column cannot take are record errors for those
   records alone, under the sink's ``on_record_error``;
4. offers each prepared frame with ``sink.offer_frame`` (all or nothing per frame); a
   refusal stalls the batch and the runtime resumes it at the same frame later (B7, B8).
   A record error the sink raises for the whole frame as it offers it (a row its router
   cannot place) holds nothing: the frame's rows are offered again record by record, and
   a record whose rows still raise is that record's error under the sink's
   ``on_record_error``, as on the row path (:class:`FrameOffer`, B167).

Under the ``dead_letter`` policy the record errors of steps 1 and 3 become dead letters
(:mod:`spate.ops._deadletter`): built once the batch is prepared, in record order whatever
step found each (so the limits count runs as on the row path, B72), and offered after the
frames with the same ack, so the batch is delivered only once they are written (B71,
B148).

Steps 3 and 4 are the row path's own routines (:meth:`ChainRuntime.check_prepared` and
:meth:`ChainRuntime.offer_held` with a :class:`~spate.ops._stage.HeldBatch`), so a
record error and a refusal behave the same on both paths.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from spate.checkpoint._ack import AckToken
from spate.errors import DeserError, DeserErrorKind, FatalError
from spate.ops._contract import Stalled
from spate.ops._frames import FrameOp, FrameSpec
from spate.ops._stage import (
    ChainRuntime,
    HeldBatch,
    Letters,
    OfferHeld,
    batch_where,
    deser_inputs,
)
from spate.records import ROW_COLUMN, Lane, PayloadBatch
from spate.sink._contract import BatchDeserializer, FrameSink, Offer, Sink

logger = logging.getLogger(__name__)


class FrameOffer:
    """A prepared frame's held offer to one sink (a :class:`~spate.ops._stage.ByRecord`):
    ``df`` is the frame before the sink's check, kept to offer its rows again one record
    at a time when the sink raises a record error for the whole frame (B167)."""

    __slots__ = ("_batch", "_df", "_frame", "_keys", "_sink", "_sink_index", "record")

    def __init__(
        self,
        sink_index: int,
        sink: FrameSink,
        frame: object,
        keys: list[bytes | None] | None,
        df: Any,
        batch: PayloadBatch,
        record: int | None = None,
    ) -> None:
        self._sink_index = sink_index
        self._sink = sink
        self._frame = frame
        self._keys = keys
        self._df = df
        self._batch = batch
        self.record = record

    def __call__(self, lane: Lane, ack: AckToken) -> Offer:
        return self._sink.offer_frame(self._frame, self._keys, lane, ack)

    def by_record(self) -> list[tuple[int, OfferHeld, int]] | None:
        df = self._df
        if ROW_COLUMN not in df.columns:
            return None
        sink = self._sink
        source_keys = self._batch.keys
        records = df.get_column(ROW_COLUMN).to_list()
        parts: list[tuple[int, OfferHeld, int]] = []
        start = 0
        while start < len(records):  # the rows of one record are consecutive
            stop = start + 1
            while stop < len(records) and records[stop] == records[start]:
                stop += 1
            rows = df.slice(start, stop - start)
            frame, bad = sink.prepare_frame(rows)
            count = rows.height - len(bad)
            if count:  # the refused rows were charged when the whole frame was checked
                record = int(records[start])
                keys = [source_keys[record]] * count if sink.frame_needs_keys else None
                offer = FrameOffer(self._sink_index, sink, frame, keys, rows, self._batch, record)
                parts.append((self._sink_index, offer, count))
            start = stop
        return parts


class FrameProcessor:
    """Runs a :class:`FrameSpec` over whole batches (see the module docstring)."""

    def __init__(
        self, spec: FrameSpec, rt: ChainRuntime, deserializer: object, sinks: Mapping[str, Sink]
    ) -> None:
        import polars as pl  # the columnar extra

        self._pl = pl
        self.spec = spec
        self._rt = rt
        if not isinstance(deserializer, BatchDeserializer) or deserializer.columnar is None:
            raise ValueError(
                "frame operators need a columnar deserializer (Avro records or unions of "
                "records, JSON single or ndjson objects, Protobuf messages of a type with a "
                "columnar form, with spate[columnar] installed); "
                "use a row chain (ctx.chain())"
            )
        self._decode = deserializer.deserialize_batch
        self._takes_bytes = deserializer.takes_bytes is True
        names = list(sinks)
        self._sinks: list[FrameSink] = []
        for name, sink in sinks.items():
            if not isinstance(sink, FrameSink):
                raise ValueError(f"sink {name} cannot take columns; use a row chain")
            self._sinks.append(sink)
        self._routes: list[tuple[int, Any]] = []
        for route in spec.routes:
            if route.sink is None:
                if len(names) != 1:
                    raise ValueError("sink() without a name needs exactly one sink")
                index = 0
            elif route.sink in names:
                index = names.index(route.sink)
            else:
                raise ValueError(f"no sink named {route.sink!r}; configured: {names}")
            self._routes.append((index, route))

    def describe(self) -> str:
        return self.spec.describe()

    def report_skips_due(self) -> None:
        """:class:`~spate.ops._contract.ReportsSkips`: the chain's skip logs (B42)."""
        self._rt.report_skips_due()

    # -- operators ------------------------------------------------------------------------

    def _apply(self, ops: Sequence[FrameOp], df: Any, batch: PayloadBatch) -> Any:
        pl = self._pl
        for op in ops:
            before = df.height
            try:
                if op.kind == "filter":
                    df = df.filter(*op.args)
                elif op.kind == "with_columns":
                    df = df.with_columns(*op.args)
                elif op.kind == "with_meta":
                    df = op.args[0].frame(df, batch, self._rt.component)
                elif op.kind == "select":
                    out = df.select(*op.args)
                    if ROW_COLUMN not in out.columns and out.height == df.height:
                        out.insert_column(out.width, df.get_column(ROW_COLUMN))
                    df = out
                else:
                    out = op.args[0](df)
                    if not isinstance(out, pl.DataFrame):
                        raise TypeError(f"returned {type(out).__name__}, not a polars DataFrame")
                    if ROW_COLUMN not in out.columns and out.height == df.height:
                        out = out.with_columns(df.get_column(ROW_COLUMN))  # not in place: user's
                    df = out
            except Exception as exc:
                self._rt.m_err_fail.inc()
                raise FatalError(
                    self._rt.component,
                    f"{op.label} raised on the batch at {batch_where(batch)}: {exc!r}",
                ) from exc
            if op.kind == "filter" and df.height < before:
                self._rt.m_drop_filter.inc(before - df.height)
        return df

    # -- BatchProcessor -------------------------------------------------------------------

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        rt = self._rt
        if rt.holding:
            rt.cell.batch = batch  # the source batch of the rows a sink holds (B111, B245)
        if resume.__class__ is HeldBatch:
            return rt.offer_held(resume, batch, ack)
        held = self._prepare(batch)
        if held is None:
            rt.m_deser_not_ready.inc()
            return Stalled(None, "not_ready")
        return rt.offer_held(held, batch, ack)

    def _prepare(self, batch: PayloadBatch) -> HeldBatch | None:
        rt = self._rt
        try:
            decoded: Any = self._decode(deser_inputs(batch, self._takes_bytes))
        except DeserError as exc:
            if exc.kind is DeserErrorKind.NOT_READY:
                return None
            raise FatalError(
                rt.deser_component, f"cannot decode {batch_where(batch)}: {exc}"
            ) from exc
        frames, errors = decoded[0], decoded[1]
        if any(error.kind is DeserErrorKind.NOT_READY for _, error in errors):
            return None  # B21: decode the whole batch again later, drop nothing
        empty = decoded[2] if len(decoded) > 2 else 0
        if empty:  # payloads that hold no record, counted as on the row path (B87)
            rt.m_deser_empty.inc(empty)
            rt.m_deser_drop_empty.inc(empty)
        if rt.dead_letter is not None:
            rt.dead_letter.seen(len(batch))  # once per batch, as on the row path (B72)
        letters: Letters = []
        for index, error in errors:
            rt.deser_error(error, batch, index, letters=letters)
        decoded = sum(df.height for _, df in frames)
        if decoded:
            rt.m_deser_ok.inc(decoded)
            rt.m_in.inc(decoded)
        items: list[tuple[int, OfferHeld, int]] = []
        for branch, df in frames:
            df = self._apply(self.spec.ops, df, batch)
            self._route(branch, df, batch, items, letters)
        if letters:
            rt.hold_letters(letters, batch, items)
        return HeldBatch(items)

    def _route(
        self,
        branch: str | None,
        df: Any,
        batch: PayloadBatch,
        items: list[tuple[int, OfferHeld, int]],
        letters: Letters,
    ) -> None:
        rt = self._rt
        routed: Any = None
        everything = False
        for sink_index, route in self._routes:
            if route.branch is not None and (
                branch is None
                or (route.branch != branch and route.branch != branch.rpartition(".")[2])
            ):
                continue
            sub = df
            if route.when is not None:
                try:
                    mask = df.select(route.when).to_series().fill_null(False)
                except Exception as exc:
                    raise rt.route_error(exc, batch, 0) from exc
                sub = df.filter(mask)
                routed = mask if routed is None else routed | mask
            else:
                everything = True
            sub = self._apply(route.ops, sub, batch)
            if sub.height:
                self._prepare_for(sink_index, sub, batch, items, letters)
        if everything:
            return
        missed = df.height if routed is None else int((~routed).sum())
        if missed:
            if self.spec.unrouted.value == "skip":
                rt.m_drop_unrouted.inc(missed)
            else:
                rows = df.get_column(ROW_COLUMN) if ROW_COLUMN in df.columns else None
                first = 0
                if rows is not None:
                    first = (
                        int(rows.filter(~routed).first()) if routed is not None else int(rows[0])
                    )
                rt.unrouted_record(batch, first)

    def _prepare_for(
        self,
        sink_index: int,
        df: Any,
        batch: PayloadBatch,
        items: list[tuple[int, OfferHeld, int]],
        letters: Letters,
    ) -> None:
        sink = self._sinks[sink_index]
        meta = self._rt.row_meta[sink_index]
        if meta is not None:
            df = meta.frame(df, batch, self._rt.sink_labels[sink_index])
        rows: list[int] | None = (
            df.get_column(ROW_COLUMN).to_list() if ROW_COLUMN in df.columns else None
        )
        prepare = functools.partial(sink.prepare_frame, df)
        frame, records, count = self._rt.check_prepared(
            sink_index, prepare, rows, df.height, batch, letters
        )
        if not count:
            return
        keys: list[bytes | None] | None = None
        if sink.frame_needs_keys:
            source_keys = batch.keys
            keys = [source_keys[r] for r in records] if records is not None else [None] * count
        items.append((sink_index, FrameOffer(sink_index, sink, frame, keys, df, batch), count))
