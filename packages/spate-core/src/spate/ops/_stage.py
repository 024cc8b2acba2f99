"""A chain bound to its deserializer, sinks and metrics; the slow paths both executors share.

:class:`ChainRuntime` is what the generated loop (:mod:`spate.ops._codegen`) and the
reference interpreter (:mod:`spate.ops._interp`) run: the steps, the resolved terminal,
the sinks' ``offer`` methods, the error policies and the metric series. The rare paths
— a deserializer error, an operator exception, an unrouted record, a row a sink refuses
to encode — are methods here, so both executors count and fail in exactly the same way.

The deserializer stage (this module's other half) applies the deserializer's contract
(:mod:`spate.ops._deser`): a value goes on, ``NO_RECORD`` is dropped as ``empty``, a
``DeserError`` is a record error under ``deser_policy`` (``skip`` by default, B28) or
under its own ``policy`` when it carries one, and
``NOT_READY`` stalls the batch so the record is decoded again later, never dropped (B21).

:class:`Cursor` is the resume position inside a batch (B8): the next record to start
plus the pending work of the record before it — the flat_map children not yet run
(``frames``, innermost first) and the final rows not yet accepted by a sink (``emits``).
Drops are counted with their reason (B3).

A sink that takes a source batch's rows at once (:func:`~spate.sink._contract.takes_rows`,
B95) is not offered row by row: the loop collects its rows with their record indexes,
and after the loop :meth:`ChainRuntime.offer_collected` has the sink check them
(``prepare_rows``; the rows it cannot take are record errors for their records alone, under
the sink's policy) and offers the rest in one call. A refusal stalls the batch with the
prepared rows as its cursor (:class:`HeldBatch`); the resume offers them again, then goes
on with whatever stalled the loop itself (B96). The columnar path
(:mod:`spate.ops._columnar`) checks and offers its frames through the same two routines,
:meth:`ChainRuntime.check_prepared` and :meth:`ChainRuntime.offer_held`. A sink whose
record policy is ``dead_letter`` is offered row by row (a dead letter is offered where its
record stands).

A sink that holds rows (a memory tier, a tee's backlog) is bound to the chain's record
policy for its index (:mod:`spate.sink._held`, B111): the chain keeps :attr:`ChainRuntime.cell`
on the record being offered, the sink notes it per held row, and a held row the sink
after it later refuses as bad is charged to that record (:meth:`ChainRuntime.held_error`).

Under the ``dead_letter`` policy a failed record is offered to the pipeline's dead-letter
sink (:mod:`spate.ops._deadletter`) with the batch's ack; a refusal stalls the chain
with the dead letter as the pending emit of sink index :data:`DEAD_LETTER_SINK`, so
the resume offers it again before going on (B71, B8).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from spate.checkpoint._ack import AckToken
from spate.errors import DeserError, DeserErrorKind, ErrorClass, ErrorPolicy, FatalError, SinkError
from spate.metrics._meter import CounterSeries, Meter
from spate.metrics.names import (
    DESER_DROPPED,
    DESER_RECORDS,
    OPS_DROPPED,
    OPS_ERRORS,
    OPS_IN,
    OPS_OUT,
)
from spate.ops._builder import ChainSpec, SinkHandle, SinkTerminal, Step, StepKind
from spate.ops._contract import Stalled
from spate.ops._deadletter import DeadLetter, Stage
from spate.ops._deser import Deserializer, many_per_payload, own_policy, takes_bytes
from spate.ops._meta import RowMeta, row_meta
from spate.ops._skiplog import SkipLog
from spate.records import Lane, PayloadBatch
from spate.sink._contract import Offer, RowBatchSink, Sink, sink_record_policy, takes_rows
from spate.sink._held import HeldErrors, Origin, RecordCell, bind_held_errors
from spate.sink._intents import RecordPosition
from spate.sink._writer import RowError

logger = logging.getLogger(__name__)

DESER_FRAME = -1
"""Frame position of items that came from a many-record deserializer (not yet checked)."""

DEAD_LETTER_SINK = -1
"""Sink index of a pending dead letter in a cursor's ``emits``."""

Frame = tuple[int, list[Any], int]
"""``(step index the items feed, items, next item position)``."""

OfferFn = Callable[[object, bytes | None, Lane, AckToken], Offer]


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where to resume a stalled batch (see the module docstring)."""

    next_index: int
    frames: tuple[Frame, ...] = ()
    emits: tuple[tuple[int, object], ...] = ()

    @property
    def pending(self) -> bool:
        return bool(self.frames or self.emits)


OfferHeld = Callable[[Lane, AckToken], Offer]
"""One held offer, made with the batch's lane and ack: a sink's ``offer_rows`` or
``offer_frame`` bound to what it prepared."""

Prepare = Callable[[], tuple[Any, Sequence[tuple[int, Any]]]]
"""A sink's check of a batch's rows or frame: ``(prepared, [(position, reason), …])``."""

Letters = list[tuple[int, Stage, str, str]]
"""Dead letters found while a whole batch is prepared (the columnar path):
``(record index, stage, reason, message)``, offered after its frames (B71)."""


@runtime_checkable
class ByRecord(Protocol):
    """A held offer of a frame's rows that can be made again one record at a time.

    A sink may raise a record error for a whole frame when it offers it — a row its
    router cannot place (B167) — holding nothing: :meth:`ChainRuntime.offer_held` then
    offers the frame's rows again record by record (:meth:`by_record`), and an offer of
    one record's rows that still raises is that record's error (:attr:`record`) under
    the sink's policy, as on the row path.
    """

    @property
    def record(self) -> int | None:
        """The record of an offer of one record's rows; None for several records'."""

    def by_record(self) -> list[tuple[int, OfferHeld, int]] | None:
        """The same rows as one held offer per record, in order (the rows the sink's
        check refuses left out: their errors were charged when first checked); None
        when the rows' records are unknown (the frame lost its row column)."""

    def __call__(self, lane: Lane, ack: AckToken) -> Offer: ...


@dataclass(slots=True)
class HeldBatch:
    """A batch's prepared work not yet taken by its sinks: ``(sink index, offer, rows)``
    from ``next`` on — rows or a frame a sink checked — then ``after``: the loop's own
    stall, or None. A refusal stalls with it as the cursor; the resume offers the same
    item again (B7, B8, B96)."""

    items: list[tuple[int, OfferHeld, int]]
    after: Stalled | None = None
    next: int = 0


Collected = list[tuple[list[object], list[int]] | None]
"""Per sink: the rows the loop collected for it and their record indexes (None for a
sink offered row by row)."""


def deser_inputs(batch: PayloadBatch, takes_bytes: bool) -> Sequence[memoryview] | Sequence[bytes]:
    """The batch's ``bytes`` values when it has them and the deserializer takes them
    (``takes_bytes``: no view is made per record), else its payload views (B97)."""
    if takes_bytes:
        values = batch.values
        if values is not None:
            return values
    return batch.payloads


class ChainRuntime:
    """A compiled chain's fixed parts: functions, sinks, policies and metric series."""

    def __init__(
        self,
        spec: ChainSpec,
        *,
        deserializer: object | None,
        sinks: Mapping[str, Sink],
        meter: Meter,
        pipeline: str,
        deser_policy: ErrorPolicy | None,
        record_policy: ErrorPolicy | None,
        component: str,
        deser_component: str,
        dead_letter: DeadLetter | None = None,
        position: RecordPosition | None = None,
    ) -> None:
        if not sinks:
            raise ValueError("a chain needs at least one sink")
        self.pipeline = pipeline
        self.component = component
        self.deser_component = deser_component
        self.spec = spec
        self.skips = SkipLog(pipeline)
        self.dead_letters = SkipLog(pipeline, action="dead-lettered")
        """The chain's skip logs; :meth:`report_skips_due` reports them (B42)."""
        self.with_meta = spec.with_meta
        self.steps: tuple[Step, ...] = spec.steps
        self.sink_names: tuple[str, ...] = tuple(sinks)
        sink_objs = tuple(sinks.values())
        # What messages call each sink: its own name (a single sink's connector name).
        self.sink_labels = tuple(getattr(s, "name", key) for key, s in sinks.items())
        self.offers: tuple[OfferFn, ...] = tuple(s.offer for s in sink_objs)
        self.record_policies: tuple[ErrorPolicy, ...] = tuple(
            _record_policy(s, record_policy) for s in sink_objs
        )
        self.sinks = sink_objs
        self.row_sinks: tuple[RowBatchSink | None, ...] = tuple(
            s
            if isinstance(s, RowBatchSink)
            and position is None
            and takes_rows(s)
            and policy is not ErrorPolicy.DEAD_LETTER
            else None
            for s, policy in zip(sink_objs, self.record_policies, strict=True)
        )
        """Per sink: the sink when the loop collects its rows for one call per batch (B95)."""
        self.batched: tuple[bool, ...] = tuple(s is not None for s in self.row_sinks)

        # Terminal.
        self.sink_index: int | None = None
        self.route: Callable[[Any, Any], object] | None = None
        self.unrouted = ErrorPolicy.FAIL
        self.handle_index: dict[SinkHandle, int] = {
            SinkHandle(name): i for i, name in enumerate(self.sink_names)
        }
        terminal = spec.terminal
        if isinstance(terminal, SinkTerminal):
            if terminal.name is None:
                if len(self.sink_names) != 1:
                    raise ValueError(
                        "sink() without a name needs exactly one sink; configured: "
                        + ", ".join(repr(n) for n in self.sink_names)
                    )
                self.sink_index = 0
            elif terminal.name in self.sink_names:
                self.sink_index = self.sink_names.index(terminal.name)
            else:
                raise ValueError(
                    f"sink({terminal.name!r}): no such sink; configured: "
                    + ", ".join(repr(n) for n in self.sink_names)
                )
        else:
            self.route = terminal.route
            self.unrouted = terminal.unrouted

        # Deserializer stage.
        # The deserializer may be handed a batch's whole ``bytes`` values instead of
        # views (``takes_bytes``); ``bytes`` itself returns such a value unchanged.
        # Either is called with a view, or with ``bytes`` when ``takes_bytes``.
        self.takes_bytes = takes_bytes(deserializer)
        self.deser: Callable[..., Any] = bytes
        self.deser_many: Callable[..., list[Any]] = _no_many
        many = many_per_payload(deserializer)
        self.many = many is not None
        if many is not None:
            self.deser_many = many.deserialize_many
        elif isinstance(deserializer, Deserializer):
            self.deser = deserializer.deserialize
        elif deserializer is not None:
            raise TypeError(
                f"{type(deserializer).__name__} is not a deserializer: it has no "
                "deserialize(), nor many = True with deserialize_many()"
            )
        if deser_policy is None:
            found = own_policy(deserializer)
            deser_policy = found if found is not None else ErrorPolicy.SKIP
        self.deser_policy = deser_policy
        self.step_policies: tuple[ErrorPolicy, ...] = tuple(
            step.policy if step.kind is StepKind.TRY_MAP else spec.on_error for step in self.steps
        )
        self.dead_letter = dead_letter
        self.position = position
        """Set to each record's offset before its rows are offered (effectively once)."""
        if dead_letter is None:
            _check_no_dead_letter(
                deser_policy, self.record_policies, self.sink_labels, self.step_policies, spec
            )
        self.cell = RecordCell()
        """The record being offered, for sinks that hold rows (set per record when
        :attr:`holding`, B111)."""
        self.holding = False
        for index, sink in enumerate(sink_objs):
            errors = HeldErrors(
                self.cell,
                functools.partial(self.held_error, index),
                self.held_dead_letter,
                # Only a dead letter needs the record itself; skip and fail name it (B349).
                positions_only=self.record_policies[index] is not ErrorPolicy.DEAD_LETTER,
            )
            if bind_held_errors(sink, errors):
                self.holding = True
        self.row_meta: tuple[RowMeta | None, ...] = tuple(
            row_meta(sink, self.cell) for sink in sink_objs
        )
        """Per sink: what adds its metadata columns to its rows (B252), else None."""
        self.dead_letter_meta = (
            row_meta(dead_letter.sink, self.cell) if dead_letter is not None else None
        )
        """What adds the dead-letter sink's metadata columns to each dead letter (B257)."""
        if any(meta is not None for meta in self.row_meta):
            # The wrapped offers read the record from the cell: the loop sets it per record.
            self.holding = True
            self.offers = tuple(
                offer if meta is None else meta.wrap(offer)
                for offer, meta in zip(self.offers, self.row_meta, strict=True)
            )

        # Metric series, resolved once.
        dc, oc = deser_component, component

        def deser_outcome(outcome: str) -> CounterSeries:
            return meter.counter(
                DESER_RECORDS, component=dc, component_type="deserializer", outcome=outcome
            )

        def deser_drop(reason: str) -> CounterSeries:
            return meter.counter(
                DESER_DROPPED, component=dc, component_type="deserializer", reason=reason
            )

        def ops_drop(reason: str) -> CounterSeries:
            return meter.counter(
                OPS_DROPPED, component=oc, component_type="operators", reason=reason
            )

        self.m_deser_ok = deser_outcome("ok")
        self.m_deser_skipped = deser_outcome("skipped")
        self.m_deser_failed = deser_outcome("failed")
        self.m_deser_not_ready = deser_outcome("not_ready")
        self.m_deser_empty = deser_outcome("empty")
        self.m_deser_drop_empty = deser_drop("empty")
        self.m_deser_drop = {kind: deser_drop(kind.value) for kind in DeserErrorKind}
        self.m_in = meter.counter(OPS_IN, component=oc, component_type="operators")
        self.m_out = tuple(
            meter.counter(OPS_OUT, component=oc, component_type="operators", sink=name)
            for name in self.sink_names
        )
        self.m_drop_filter = ops_drop("filter")
        self.m_drop_error = ops_drop("error")
        self.m_drop_flat_map_empty = ops_drop("flat_map_empty")
        self.m_drop_unrouted = ops_drop("unrouted")
        self.m_drop_record_error = ops_drop("record_error")
        self.m_err_skip = meter.counter(
            OPS_ERRORS, component=oc, component_type="operators", policy="skip"
        )
        self.m_err_fail = meter.counter(
            OPS_ERRORS, component=oc, component_type="operators", policy="fail"
        )
        self.m_err_dead_letter = meter.counter(
            OPS_ERRORS, component=oc, component_type="operators", policy="dead_letter"
        )
        self.m_deser_dead_letter = deser_outcome("dead_letter")

    def report_skips_due(self) -> None:
        """Log the skip and dead-letter counts whose interval has passed (B42)."""
        self.skips.report_due()
        self.dead_letters.report_due()

    def inputs(self, batch: PayloadBatch) -> Sequence[memoryview] | Sequence[bytes]:
        """What the deserializer is given for each record of ``batch``, by index.

        The batch's ``bytes`` values when it has them and the deserializer takes them
        (no view per record), else its payload views. Read once per batch.
        """
        return deser_inputs(batch, self.takes_bytes)

    # -- hot counters (the generated loop keeps these in locals and adds them per batch) --

    def count_batch(
        self, n_in: int, outs: list[int], d_filter: int, d_fm_empty: int, d_empty: int
    ) -> None:
        """Add one batch's worth of hot counters to the metric series."""
        if n_in:
            self.m_in.inc(n_in)
            self.m_deser_ok.inc(n_in)
        for series, n in zip(self.m_out, outs, strict=True):
            if n:
                series.inc(n)
        if d_filter:
            self.m_drop_filter.inc(d_filter)
        if d_fm_empty:
            self.m_drop_flat_map_empty.inc(d_fm_empty)
        if d_empty:
            self.m_deser_empty.inc(d_empty)
            self.m_deser_drop_empty.inc(d_empty)

    # -- slow paths, shared by both executors --

    def deser_error(
        self,
        exc: DeserError,
        batch: PayloadBatch,
        index: int,
        ack: AckToken | None = None,
        frames: tuple[Frame, ...] = (),
        letters: Letters | None = None,
    ) -> Stalled | None:
        """A record the deserializer could not decode: count it; raise under ``fail``;
        under ``dead_letter`` offer it to the dead-letter sink (a stall when refused), or
        add it to ``letters`` when given.

        The error's own ``policy``, when it has one, wins over ``on_error``.
        """
        policy = self.deser_policy if exc.policy is None else exc.policy
        if policy is ErrorPolicy.DEAD_LETTER:
            self.m_deser_dead_letter.inc()
            if letters is not None:
                letters.append((index, "deserializer", exc.kind.value, exc.reason))
                return None
            return self.to_dead_letter(
                "deserializer", exc.kind.value, exc.reason, batch, index, ack, frames, ()
            )
        if policy is ErrorPolicy.FAIL:
            self.m_deser_failed.inc()
            setting = "; on_error is fail" if exc.policy is None else ""
            raise FatalError(
                self.deser_component,
                f"cannot decode the record at {_where(batch, index)}: {exc.reason} "
                f"({exc.kind.value}{setting})",
            ) from exc
        self.m_deser_skipped.inc()
        self.m_deser_drop[exc.kind].inc()
        self.skips.skipped(self.deser_component, exc.kind.value, _where(batch, index), exc.reason)
        return None

    def not_ready(self, index: int) -> Stalled:
        """The deserializer cannot decode the record yet: stall at it (B21)."""
        self.m_deser_not_ready.inc()
        return Stalled(Cursor(index), "not_ready")

    def op_error(
        self,
        step_index: int,
        exc: Exception,
        batch: PayloadBatch,
        index: int,
        ack: AckToken | None = None,
        frames: tuple[Frame, ...] = (),
    ) -> Stalled | None:
        """An operator raised: under ``skip`` count the drop, under ``dead_letter`` offer
        the record to the dead-letter sink, else raise ``FatalError``."""
        step = self.steps[step_index]
        policy = self.step_policies[step_index]
        if policy is ErrorPolicy.SKIP:
            self.m_err_skip.inc()
            self.m_drop_error.inc()
            self.skips.skipped(
                self.component, "error", _where(batch, index), f"{step.label}: {exc!r}"
            )
            return None
        if policy is ErrorPolicy.DEAD_LETTER:
            self.m_err_dead_letter.inc()
            reason = type(exc).__name__
            message = f"{step.label}: {exc!r}"
            return self.to_dead_letter("operator", reason, message, batch, index, ack, frames, ())
        self.m_err_fail.inc()
        raise FatalError(
            self.component,
            f"{step.label} raised on the record at {_where(batch, index)}: {exc!r}",
        ) from exc

    def route_error(self, exc: Exception, batch: PayloadBatch, index: int) -> FatalError:
        """The route function of a split raised: always fatal (fail policy)."""
        self.m_err_fail.inc()
        return FatalError(
            self.component,
            f"the split's route function raised on the record at {_where(batch, index)}: {exc!r}",
        )

    def unrouted_record(self, batch: PayloadBatch, index: int) -> None:
        """The route function emitted nothing: count under ``skip``, else raise."""
        if self.unrouted is ErrorPolicy.SKIP:
            self.m_drop_unrouted.inc()
            self.skips.skipped(self.component, "unrouted", _where(batch, index), "")
            return
        raise FatalError(
            self.component,
            f"the record at {_where(batch, index)} was routed to no sink "
            "(use split(unrouted='skip') to drop such records)",
        )

    def sink_error(
        self,
        sink_index: int,
        exc: SinkError,
        batch: PayloadBatch,
        index: int,
        ack: AckToken | None = None,
        frames: tuple[Frame, ...] = (),
        rest: tuple[tuple[int, object], ...] = (),
        letters: Letters | None = None,
    ) -> Stalled | None:
        """A sink refused a row with ``SinkError``: record errors follow the sink's policy.

        ``rest`` are the emits of the record still to offer after this one (a split);
        ``letters``, when given, takes a dead letter instead of an offer.
        """
        if exc.error_class is ErrorClass.RECORD:
            policy = self.record_policies[sink_index]
            if policy is ErrorPolicy.SKIP:
                self.m_drop_record_error.inc()
                label = f"sink {self.sink_labels[sink_index]}"
                self.skips.skipped(label, "record_error", _where(batch, index), exc.reason)
                return None
            if policy is ErrorPolicy.DEAD_LETTER:
                message = f"sink {self.sink_labels[sink_index]}: {exc.reason}"
                if letters is not None:
                    letters.append((index, "sink", "record_error", message))
                    return None
                return self.to_dead_letter(
                    "sink", "record_error", message, batch, index, ack, frames, rest
                )
            raise FatalError(
                f"sink {self.sink_labels[sink_index]}",
                f"cannot write a row from the record at {_where(batch, index)}: {exc.reason} "
                "(on_record_error is fail)",
            ) from exc
        raise self._offer_failed(sink_index, exc) from exc

    def _offer_failed(self, sink_index: int, exc: SinkError) -> FatalError:
        return FatalError(
            f"sink {self.sink_labels[sink_index]}",
            f"offer failed: {exc.reason} ({exc.error_class.value})",
        )

    def to_dead_letter(
        self,
        stage: Stage,
        reason: str,
        message: str,
        batch: PayloadBatch,
        index: int,
        ack: AckToken | None,
        frames: tuple[Frame, ...],
        rest: tuple[tuple[int, object], ...],
    ) -> Stalled | None:
        """Offer record ``index`` to the dead-letter sink with the batch's ack (B71).

        A refusal stalls the chain after the record, with the dead letter (and ``rest``)
        pending, so the resume offers it again before anything else (B8).
        """
        if ack is None:
            raise self._no_dead_letter(stage, reason, message, batch, index)
        row = self._dead_letter_row(stage, reason, message, batch, index)
        if self.offer_dead_letter(row, batch.keys[index], batch, index, ack):
            return None
        cursor = Cursor(index + 1, frames, ((DEAD_LETTER_SINK, row), *rest))
        return Stalled(cursor, "sink_full", "dead_letter")

    def _dead_letter_row(
        self,
        stage: Stage,
        reason: str,
        message: str,
        batch: PayloadBatch,
        index: int,
        fields: tuple[tuple[str, str], ...] = (),
    ) -> object:
        """Record ``index``'s dead letter, counted and logged (checks the limits, B72)."""
        dlq = self.dead_letter
        if dlq is None:
            raise self._no_dead_letter(stage, reason, message, batch, index)
        row = dlq.record(stage, reason, message, batch, index, fields)
        self.dead_letters.skipped(stage, reason, _where(batch, index), message)
        return row

    @staticmethod
    def _no_dead_letter(
        stage: Stage, reason: str, message: str, batch: PayloadBatch, index: int
    ) -> FatalError:
        return FatalError(
            stage,
            f"the record at {_where(batch, index)} is to be dead-lettered ({reason}: "
            f"{message}), but the pipeline has no dead_letter section",
        )

    def held_error(
        self, sink_index: int, origin: Origin, exc: SinkError, ack: AckToken
    ) -> object | None:
        """A row sink ``sink_index`` held was refused as bad by the sink after it: apply
        the sink's policy to the row's own record (B111). Returns its dead letter when
        the dead-letter sink refused it for now (the holder offers it again); raises
        ``FatalError`` under ``fail``. Called by the holder on the pipeline thread.
        """
        batch, index = origin
        if self.record_policies[sink_index] is ErrorPolicy.DEAD_LETTER:
            message = f"sink {self.sink_labels[sink_index]}: {exc.reason}"
            # A row refused at write time carries the server's code with it (B246).
            fields = exc.fields if isinstance(exc, RowError) else ()
            row = self._dead_letter_row("sink", "record_error", message, batch, index, fields)
            if self.offer_dead_letter(row, batch.keys[index], batch, index, ack):
                return None
            return row
        return self.sink_error(sink_index, exc, batch, index)

    def held_dead_letter(self, row: object, origin: Origin, ack: AckToken) -> bool:
        """Offer a held row's dead letter again; False while the sink refuses it (B111)."""
        batch, index = origin
        return self.offer_dead_letter(row, batch.keys[index], batch, index, ack)

    def offer_dead_letter(
        self, row: object, key: bytes | None, batch: PayloadBatch, index: int, ack: AckToken
    ) -> bool:
        """Offer one dead letter; False when the sink refused it for now."""
        dlq = self.dead_letter
        assert dlq is not None
        meta = self.dead_letter_meta
        try:
            if meta is not None:
                row = meta.one(row, batch, index)
            result = dlq.offer_fn(row, key, batch.lane, ack)
        except SinkError as exc:
            raise FatalError(
                "dead_letter",
                f"the dead-letter sink cannot take the record at {_where(batch, index)}: "
                f"{exc.reason}",
            ) from exc
        return result is not Offer.REJECTED

    def check_prepared(
        self,
        index: int,
        prepare: Prepare,
        records: Sequence[int] | None,
        count: int,
        batch: PayloadBatch,
        letters: Letters | None = None,
    ) -> tuple[Any, Sequence[int] | None, int]:
        """Have sink ``index`` check ``count`` rows of ``batch`` — collected rows or a frame
        (``prepare``: its ``prepare_rows`` or ``prepare_frame``) — for one offer.

        Each row the sink cannot take is a record error for its own record
        (``records[position]``; the batch's first when unknown) under the sink's policy
        (B28), a dead letter going to ``letters`` when given; a ``SinkError`` is a
        whole-batch problem, never one record's (B20). Returns what the sink prepared, the
        records of its rows and their count.
        """
        try:
            prepared, bad = prepare()
        except SinkError as exc:
            raise self._batch_failed(index, exc, batch) from exc
        if not bad:
            return prepared, records, count
        for position, reason in bad:
            if records is None and letters is not None:
                self._unknown_record(index, reason, batch)
            record = records[position] if records is not None else 0
            error = SinkError(reason, ErrorClass.RECORD)
            self.sink_error(index, error, batch, record, letters=letters)
        if records is not None:
            dropped = {position for position, _ in bad}
            records = [r for i, r in enumerate(records) if i not in dropped]
        return prepared, records, count - len(bad)

    def offer_held(self, held: HeldBatch, batch: PayloadBatch, ack: AckToken) -> Stalled | None:
        """Offer what is still held, in order; stall at a refusal with ``held`` as the
        cursor (B7, B8, B96), else return ``held.after``. Both paths' one offer loop."""
        items = held.items
        lane = batch.lane
        while held.next < len(items):
            index, offer, count = items[held.next]
            try:
                result = offer(lane, ack)
            except SinkError as exc:
                parts = self._by_record(index, offer, exc, batch)
                if parts is None:
                    raise self._offer_failed(index, exc) from exc
                items[held.next : held.next + 1] = parts
                continue
            if result is Offer.REJECTED:
                name = "dead_letter" if index == DEAD_LETTER_SINK else self.sink_names[index]
                return Stalled(held, "sink_full", name)
            if count:
                self.m_out[index].inc(count)
            held.next += 1
        return held.after

    def _by_record(
        self, index: int, offer: OfferHeld, exc: SinkError, batch: PayloadBatch
    ) -> list[tuple[int, OfferHeld, int]] | None:
        """What replaces a held offer that raised a record error (B167): its rows offered
        record by record, or — for one record's rows — nothing under ``skip`` (counted),
        the record's dead letter under ``dead_letter``; raises under ``fail``. None when
        the error cannot be charged to records (the caller fails the batch)."""
        if exc.error_class is not ErrorClass.RECORD or not isinstance(offer, ByRecord):
            return None
        record = offer.record
        if record is None:
            return offer.by_record()
        letters: Letters = []
        self.sink_error(index, exc, batch, record, letters=letters)
        parts: list[tuple[int, OfferHeld, int]] = []
        if letters:
            self.hold_letters(letters, batch, parts)
        return parts

    def hold_letters(
        self, letters: Letters, batch: PayloadBatch, items: list[tuple[int, OfferHeld, int]]
    ) -> None:
        """Add a batch's dead letters to its held offers, in record order whatever stage
        found each, so the limits count runs as the row path does (B71, B72)."""
        letters.sort(key=_first)
        for index, stage, reason, message in letters:
            row = self._dead_letter_row(stage, reason, message, batch, index)
            offer = functools.partial(self._offer_letter, row, batch, index)
            items.append((DEAD_LETTER_SINK, offer, 0))

    def _offer_letter(
        self, row: object, batch: PayloadBatch, index: int, lane: Lane, ack: AckToken
    ) -> Offer:
        accepted = self.offer_dead_letter(row, batch.keys[index], batch, index, ack)
        return Offer.ACCEPTED if accepted else Offer.REJECTED

    def offer_collected(
        self, collected: Collected, batch: PayloadBatch, ack: AckToken, after: Stalled | None
    ) -> Stalled | None:
        """Hand each batched sink the rows the loop collected for it (B95): record errors
        for the rows it cannot take, then one offer of the rest; ``after`` (the loop's own
        stall) is returned once every sink took its rows."""
        items: list[tuple[int, OfferHeld, int]] = []
        keys = batch.keys
        for index, rows in enumerate(collected):
            if rows is None or not rows[0]:
                continue
            sink = self.row_sinks[index]
            if sink is None:
                raise RuntimeError(f"rows collected for {self.sink_names[index]}, not batched")
            values, records = rows
            meta = self.row_meta[index]
            if meta is not None:
                values = meta.rows(values, records, batch)
            prepare = functools.partial(
                sink.prepare_rows, values, list(map(keys.__getitem__, records)), batch.lane
            )
            if self.holding:
                self.cell.records = records  # a spool keeps their positions (B421)
            try:
                prepared, _, count = self.check_prepared(
                    index, prepare, records, len(values), batch
                )
            finally:
                self.cell.records = None
            if count:
                items.append((index, functools.partial(sink.offer_rows, prepared), count))
        if not items:
            return after
        return self.offer_held(HeldBatch(items, after), batch, ack)

    def _unknown_record(self, index: int, reason: object, batch: PayloadBatch) -> None:
        """A frame row the sink refused has no record (the frame operators made it from
        several, or dropped the row column): it cannot be dead-lettered."""
        if self.record_policies[index] is ErrorPolicy.DEAD_LETTER:
            raise FatalError(
                f"sink {self.sink_labels[index]}",
                f"cannot write a row of the batch at {batch_where(batch)}: {reason}; the "
                "frame operators dropped the record it came from (__spate_row), so it cannot "
                "be dead-lettered (on_record_error is dead_letter)",
            )

    def _batch_failed(self, sink_index: int, exc: SinkError, batch: PayloadBatch) -> FatalError:
        return FatalError(
            f"sink {self.sink_labels[sink_index]}",
            f"cannot write the batch at {batch_where(batch)}: {exc.reason} "
            f"({exc.error_class.value})",
        )

    def describe(self) -> str:
        return self.spec.describe()


def _check_no_dead_letter(
    deser_policy: ErrorPolicy,
    record_policies: tuple[ErrorPolicy, ...],
    sink_labels: tuple[str, ...],
    step_policies: tuple[ErrorPolicy, ...],
    spec: ChainSpec,
) -> None:
    """Without a dead-letter sink, no policy may be ``dead_letter``."""
    dl = ErrorPolicy.DEAD_LETTER
    where = None
    if deser_policy is dl:
        where = "the deserializer's on_error"
    for label, policy in zip(sink_labels, record_policies, strict=True):
        if policy is dl:
            where = f"sink {label}'s on_record_error"
    for step, policy in zip(spec.steps, step_policies, strict=True):
        if policy is dl:
            where = f"{step.label}"
    if where is not None:
        raise ValueError(
            f"{where} is dead_letter, but the pipeline has no dead_letter section "
            "naming a dead-letter sink"
        )


def _record_policy(sink: Sink, default: ErrorPolicy | None) -> ErrorPolicy:
    if default is not None:
        return default
    return sink_record_policy(sink)


def batch_where(batch: PayloadBatch) -> str:
    """Where a whole batch is, for messages: its lane and offsets."""
    return f"{batch.lane} offsets {batch.first_offset}..{batch.last_offset}"


def _where(batch: PayloadBatch, index: int) -> str:
    offset = batch.offsets[index] if index < len(batch.offsets) else "?"
    return f"{batch.lane} offset {offset}"


def _first(letter: tuple[int, Stage, str, str]) -> int:
    return letter[0]


def _no_many(payload: memoryview | bytes) -> list[Any]:
    raise RuntimeError("not a many-record deserializer")
