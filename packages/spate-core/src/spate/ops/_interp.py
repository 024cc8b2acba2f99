"""The reference interpreter: the plain, obviously-correct meaning of a chain.

It walks the steps of a :class:`~spate.ops._stage.ChainRuntime` one value at a time,
recursing into flat_map children, and counts every event directly. The generated loop
(:mod:`spate.ops._codegen`) must produce the same rows, drops, errors, stalls and acks;
a property test compares the two on generated chains and batches. The generated loop
also uses :meth:`Interpreter.resume_pending` to finish the half-done record of a stalled
batch (B8), since that path is rare and must not run any operator twice.
"""

from __future__ import annotations

from typing import Any

from spate.checkpoint._ack import AckToken
from spate.errors import DeserError, DeserErrorKind, SinkError
from spate.ops._builder import StepKind
from spate.ops._contract import Stalled
from spate.ops._deser import NO_RECORD
from spate.ops._split import RouteOut
from spate.ops._stage import DEAD_LETTER_SINK, DESER_FRAME, ChainRuntime, Cursor, Frame
from spate.records import PayloadBatch, RecordMeta
from spate.sink._contract import Offer


class Interpreter:
    """Executes a chain step by step; implements ``BatchProcessor``."""

    def __init__(self, rt: ChainRuntime) -> None:
        self.rt = rt

    def report_skips_due(self) -> None:
        """:class:`~spate.ops._contract.ReportsSkips`: the chain's skip logs (B42)."""
        self.rt.report_skips_due()

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        start = 0
        if resume is not None:
            cursor = as_cursor(resume)
            stalled = self.resume_pending(batch, ack, cursor)
            if stalled is not None:
                return stalled
            start = cursor.next_index
        if self.rt.dead_letter is not None and resume is None:
            self.rt.dead_letter.seen(len(batch))
        inputs = self.rt.inputs(batch)
        for index in range(start, len(inputs)):
            stalled = self._record(batch, ack, index, inputs[index])
            if stalled is not None:
                return stalled
        return None

    def resume_pending(self, batch: PayloadBatch, ack: AckToken, cursor: Cursor) -> Stalled | None:
        """Finish the half-done record before ``cursor.next_index``: emits, then frames."""
        if not cursor.pending:
            return None
        index = cursor.next_index - 1
        if self.rt.position is not None:
            self.rt.position.offset = batch.offsets[index]
        if self.rt.holding:
            self.rt.cell.batch, self.rt.cell.index = batch, index
        stalled = self._offer_emits(batch, ack, index, list(cursor.emits), 0, cursor.frames)
        if stalled is not None:
            return stalled
        frames = cursor.frames
        for depth, (step, items, pos) in enumerate(frames):
            stalled = self._items(batch, ack, index, step, items, pos, frames[depth + 1 :])
            if stalled is not None:
                return stalled
        return None

    def _record(
        self, batch: PayloadBatch, ack: AckToken, index: int, payload: memoryview | bytes
    ) -> Stalled | None:
        rt = self.rt
        if rt.position is not None:
            rt.position.offset = batch.offsets[index]
        if rt.holding:
            rt.cell.batch, rt.cell.index = batch, index
        try:
            if rt.many:
                items = rt.deser_many(payload)
            else:
                value = rt.deser(payload)
        except DeserError as exc:
            if exc.kind is DeserErrorKind.NOT_READY:
                return rt.not_ready(index)
            return rt.deser_error(exc, batch, index, ack)
        if rt.many:
            if has_not_ready(items):
                return rt.not_ready(index)
            return self._items(batch, ack, index, DESER_FRAME, items, 0, ())
        if value is NO_RECORD:
            rt.count_batch(0, [0] * len(rt.offers), 0, 0, 1)
            return None
        rt.count_batch(1, [0] * len(rt.offers), 0, 0, 0)
        if rt.with_meta:
            value = (value, record_meta(batch, index))
        return self._value(batch, ack, index, 0, value, ())

    def _items(
        self,
        batch: PayloadBatch,
        ack: AckToken,
        index: int,
        step: int,
        items: list[Any],
        pos: int,
        outer: tuple[Frame, ...],
    ) -> Stalled | None:
        rt = self.rt
        for j in range(pos, len(items)):
            value = items[j]
            frames: tuple[Frame, ...] = ((step, items, j + 1), *outer)
            if step == DESER_FRAME:
                if isinstance(value, DeserError):
                    stalled = rt.deser_error(value, batch, index, ack, frames)
                    if stalled is not None:
                        return stalled
                    continue
                if value is NO_RECORD:
                    rt.count_batch(0, [0] * len(rt.offers), 0, 0, 1)
                    continue
                rt.count_batch(1, [0] * len(rt.offers), 0, 0, 0)
                if rt.with_meta:
                    value = (value, record_meta(batch, index))
                stalled = self._value(batch, ack, index, 0, value, frames)
            else:
                stalled = self._value(batch, ack, index, step, value, frames)
            if stalled is not None:
                return stalled
        return None

    def _value(
        self,
        batch: PayloadBatch,
        ack: AckToken,
        index: int,
        start: int,
        value: Any,
        frames: tuple[Frame, ...],
    ) -> Stalled | None:
        rt = self.rt
        nsinks = len(rt.offers)
        for k in range(start, len(rt.steps)):
            step = rt.steps[k]
            kind = step.kind
            try:
                if kind is StepKind.MAP or kind is StepKind.TRY_MAP:
                    value = step.fn(value)
                elif kind is StepKind.FILTER:
                    if not step.fn(value):
                        rt.count_batch(0, [0] * nsinks, 1, 0, 0)
                        return None
                elif kind is StepKind.INSPECT:
                    step.fn(value)
                else:
                    children = list(step.fn(value))
            except Exception as exc:
                return rt.op_error(k, exc, batch, index, ack, frames)
            if kind is StepKind.FLAT_MAP:
                if not children:
                    rt.count_batch(0, [0] * nsinks, 0, 1, 0)
                    return None
                return self._items(batch, ack, index, k + 1, children, 0, frames)
        # Terminal.
        if rt.sink_index is not None:
            emits: list[tuple[int, object]] = [(rt.sink_index, value)]
        else:
            assert rt.route is not None
            out = RouteOut(rt.handle_index)
            try:
                rt.route(value, out)
            except Exception as exc:
                raise rt.route_error(exc, batch, index) from exc
            if not out.buf:
                rt.unrouted_record(batch, index)
                return None
            emits = out.buf
        return self._offer_emits(batch, ack, index, emits, 0, frames)

    def _offer_emits(
        self,
        batch: PayloadBatch,
        ack: AckToken,
        index: int,
        emits: list[tuple[int, object]],
        pos: int,
        frames: tuple[Frame, ...],
    ) -> Stalled | None:
        rt = self.rt
        key = batch.keys[index]
        lane = batch.lane
        for e in range(pos, len(emits)):
            sink, row = emits[e]
            if sink == DEAD_LETTER_SINK:
                if not rt.offer_dead_letter(row, key, batch, index, ack):
                    cursor = Cursor(index + 1, frames, tuple(emits[e:]))
                    return Stalled(cursor, "sink_full", "dead_letter")
                continue
            try:
                result = rt.offers[sink](row, key, lane, ack)
            except SinkError as exc:
                stalled = rt.sink_error(sink, exc, batch, index, ack, frames, tuple(emits[e + 1 :]))
                if stalled is not None:
                    return stalled
                continue
            if result is Offer.REJECTED:
                cursor = Cursor(index + 1, frames, tuple(emits[e:]))
                return Stalled(cursor, "sink_full", rt.sink_names[sink])
            outs = [0] * len(rt.offers)
            outs[sink] = 1
            rt.count_batch(0, outs, 0, 0, 0)
        return None


def record_meta(batch: PayloadBatch, index: int) -> RecordMeta:
    """Where record ``index`` of ``batch`` came from (for ``ctx.chain(meta=True)``)."""
    return RecordMeta(
        batch.lane,
        batch.offsets[index],
        batch.keys[index],
        batch.timestamps[index],
        batch.headers[index],
    )


def as_cursor(resume: object) -> Cursor:
    """Check that ``resume`` is a cursor this package handed out."""
    if not isinstance(resume, Cursor):
        raise TypeError(f"resume must be the cursor of a Stalled result, got {resume!r}")
    return resume


def has_not_ready(items: list[Any]) -> bool:
    """Whether a many-record deserializer reported an item as not ready (stall it all)."""
    for item in items:
        if isinstance(item, DeserError) and item.kind is DeserErrorKind.NOT_READY:
            return True
    return False
