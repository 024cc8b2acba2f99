"""The sink contract as the runtime and the operator chain see it.

The chain hands each output row to :meth:`Sink.offer` together with the ack token of
the source batch it came from. A sink that accepts a row becomes a holder of that token
(``ack.retain(holder)`` once per buffer and batch) and later releases it with
``ack.release(ok, holder=holder)``: ``ok=True`` once the buffer is durably written,
``ok=False`` when it is abandoned or failed fatally (B2, B4, B39). A holder keeping
single rows counts them with :class:`~spate.checkpoint.AckHolds`. A sink that cannot
take more answers :attr:`Offer.REJECTED`; the chain then stops where it is and the
runtime pauses intake and offers the same row again later (B7, B8).

Sinks compose: a sink that wraps another (a spool tier, a tee) implements this same
protocol and forwards rows and acks.

On revocation the runtime needs only the revoked lanes' rows written (B15). A sink that
can tell which buffers hold them implements :class:`LaneFlushingSink`
(``flush_lanes``); the runtime calls it through :func:`flush_lanes`, which falls back to
a full :meth:`Sink.flush` for a sink that does not (B40).

A sink may also take the rows of one source batch at once (:class:`RowBatchSink`, B95):
the chain then collects that sink's rows of the batch and, after the loop, hands them
over in two calls — ``prepare_rows`` checks them (per column where it can) and names the
rows it cannot take, which become record errors for those records alone; ``offer_rows``
takes the rest all or nothing. The chain asks :func:`takes_rows`; every other sink (a
third-party sink, a spool tier, a tee) keeps getting one :meth:`Sink.offer` per row.

The columnar path hands a sink a source batch's rows as one frame (:class:`FrameSink`):
``prepare_frame`` checks it per column and names the rows it cannot take, as
``prepare_rows`` does; ``offer_frame`` takes the rest all or nothing. The chain asks
:func:`takes_frames`, and decodes a batch as columns only with a
:class:`BatchDeserializer` whose ``columnar`` decoder is present.

A spool in front of the sink pool names the batches it hands on
(:class:`IdentifiedSink`, B56); a sink with per-lane state forgets revoked lanes
(:class:`RevocationAwareSink`, B89); ``delivery: effectively_once`` needs every sink to be
an :class:`EffectivelyOnceSink` that records intents (B90).

Every capability is a declared :class:`~typing.Protocol` (ADR 0023), checked with
``isinstance`` once, when the chain is compiled, a tier starts or the revocation asks,
never probed attribute by attribute (``hasattr``/``getattr``) and never called past the
type checker (``# type: ignore``); a test of the source tree keeps it so (B230).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from typing import Final, Protocol, runtime_checkable

from spate.checkpoint._ack import AckToken
from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.records import Lane, MetaColumn


class Offer(enum.Enum):
    """Result of :meth:`Sink.offer`."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"


# The members as module constants for per-row code: on Python 3.11 every ``Offer.ACCEPTED``
# goes through the enum class's attribute lookup (about 70 ns, a tenth of a pooled offer).
ACCEPTED: Final = Offer.ACCEPTED
REJECTED: Final = Offer.REJECTED


class Sink(Protocol):
    """A destination for rows; everything below this seam belongs to the sink."""

    name: str

    def start(self) -> None:
        """Connect and probe every endpoint; raise ``SinkError`` naming it on failure (B29)."""
        ...

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """Take one row for writing, or refuse it for now. Never blocks.

        A value that cannot be encoded raises ``SinkError`` with ``ErrorClass.RECORD``;
        the chain applies the record error policy to it.
        """
        ...

    def tick(self) -> None:
        """Checkpoint tick: seal partial buffers so their acks can resolve (B10)."""
        ...

    def flush(self, deadline: float) -> bool:
        """Seal every buffer and wait until all are written or ``deadline`` (monotonic).

        Returns True when nothing is left unwritten. Called on drain, and on revocation
        when the sink has no ``flush_lanes`` (:class:`LaneFlushingSink`).
        """
        ...

    def abandon(self) -> int:
        """Fail the acks of everything not yet written (B4); return how many rows."""
        ...

    def ready(self) -> bool:
        """Whether the sink's probe passed (feeds ``/readyz``)."""
        ...

    def close(self) -> None:
        """Stop workers. Anything still held is failed first (B4)."""
        ...


@runtime_checkable
class LaneFlushingSink(Sink, Protocol):
    """A sink that can write out the rows of some lanes only (B40)."""

    def flush_lanes(self, lanes: Collection[Lane], deadline: float) -> bool:
        """Seal the buffers holding rows of ``lanes`` and wait until those are written or
        ``deadline`` (monotonic). Buffers holding no row of ``lanes`` stay open.

        Returns True when no row of ``lanes`` is left unwritten (rows of other lanes
        sharing a buffer with them are written along). Called on revocation; blocks.
        """
        ...


@runtime_checkable
class ReplayingSink(Sink, Protocol):
    """A sink that rebuilds recorded blocks on a replay (effectively once, B89, B121).

    A replayed block is sealed only by its own rows: it holds budget and pending batches
    until the lane's records reach its recorded end. The runtime keeps such lanes
    fetching while it pauses the others for the byte budget or ``max_pending_batches``,
    so a replay always completes.
    """

    def replaying_lanes(self) -> frozenset[Lane]:
        """Lanes with a replayed block that holds rows and waits for more. Pipeline
        thread; cheap (called on loop turns while the source is paused)."""
        ...


@runtime_checkable
class MetaColumnsSink(Sink, Protocol):
    """A sink some of whose columns come from each row's record, not from the row (B252).

    The chain adds each :class:`~spate.records.MetaColumn` to every row it hands the sink
    (a mapping row gets the column's name, a tuple or list row the value at the column's
    position), from the record the row came from: one ``offer``, one call of rows or one
    frame alike (ADR 0020). An empty ``meta_columns`` asks for nothing.
    """

    meta_columns: tuple[MetaColumn, ...]


@runtime_checkable
class RowBatchSink(Sink, Protocol):
    """A sink that takes a source batch's rows in one call (B95).

    ``takes_rows`` says whether it does so now (a sink may not, e.g. under
    ``pipeline.delivery: effectively_once``, which places each row by its own offset).
    """

    takes_rows: bool

    def prepare_rows(
        self, rows: list[object], keys: Sequence[bytes | None], lane: Lane
    ) -> tuple[object, list[tuple[int, str]]]:
        """Check ``rows`` (with their keys) for writing; hold nothing. Never blocks.

        Returns the prepared rows to hand to :meth:`offer_rows` and the rows that cannot
        be written as ``(position, reason)``: record errors for those rows alone, with the
        reason a per-row :meth:`Sink.offer` would have raised. A whole-batch problem
        (``validate_schema: full`` refusing the first row) raises ``SinkError``.
        """
        ...

    def offer_rows(self, prepared: object, lane: Lane, ack: AckToken) -> Offer:
        """Take every prepared row, or none of them for now (``REJECTED``; the chain
        offers the same prepared rows again later, B7, B8). Never blocks."""
        ...


@runtime_checkable
class FrameSink(Sink, Protocol):
    """A sink that takes a source batch's rows as one frame (the columnar path).

    ``takes_frames`` says whether it does so now (a ClickHouse sink that evolves its table
    does not); ``frame_needs_keys`` whether :meth:`offer_frame` needs the records' keys (a
    router placing rows by their key).
    """

    takes_frames: bool
    frame_needs_keys: bool

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """Check ``frame`` per column; hold nothing. Never blocks.

        Returns the frame to hand to :meth:`offer_frame` and the rows that cannot be
        written as ``(position, reason)``: record errors for those rows alone (B28). A
        whole-frame problem raises ``SinkError``.
        """
        ...

    def offer_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None = None,
    ) -> Offer:
        """Take every row of a prepared frame, or none of them for now (``REJECTED``; the
        chain offers the same frame again later, B7, B8). ``keys`` are the rows' record
        keys when :attr:`frame_needs_keys`, else None. ``shards``, when given, are the
        rows' shards as the chain's router placed them (a sink that places rows itself,
        or has no shards, ignores them). Never blocks."""
        ...


@runtime_checkable
class IdentifiedSink(Sink, Protocol):
    """A sink that can name the batches some rows form, so the same rows offered again
    under the same identity in a later run carry the same dedup tokens (a spool's
    replay, B56). The spool calls it around each stored batch it hands on."""

    def begin_identified(self, identity: str) -> None:
        """Rows offered from now until :meth:`end_identified` form batches whose tokens
        derive from ``identity``. Pipeline thread; never blocks."""
        ...

    def end_identified(self) -> None:
        """Seal the identified rows' batches and return to run-nonce tokens."""
        ...


@runtime_checkable
class RevocationAwareSink(Sink, Protocol):
    """A sink that keeps per-lane state beyond its buffers (effectively once: replayed
    blocks and intents, B89) and must forget a lane the pipeline lost or gave up."""

    def lanes_revoked(self, lanes: Collection[Lane]) -> None:
        """Forget ``lanes``' state (read again if assigned later). Pipeline thread."""
        ...


@runtime_checkable
class EffectivelyOnceSink(Protocol):
    """A sink that says whether it records block intents, as
    ``pipeline.delivery: effectively_once`` needs of every sink (B90)."""

    effectively_once: bool


@runtime_checkable
class BatchDeserializer(Protocol):
    """A deserializer that decodes a whole source batch into columns (the columnar path).

    ``columnar`` is its columnar decoder, or None when it has none (``spate[columnar]``
    not installed, or a framing or schema the decoder does not cover): the pipeline then
    runs on rows. ``takes_bytes``: it is handed the batch's whole ``bytes`` payloads
    when the source has them (no view per record, B97).
    """

    columnar: object | None
    takes_bytes: bool

    def deserialize_batch(self, payloads: Sequence[bytes | memoryview]) -> object:
        """Decode ``payloads`` as columns: ``(frames, errors, ...)`` as the connector's
        columnar decoder documents. Pipeline thread."""
        ...


@runtime_checkable
class RecordPolicySink(Protocol):
    """A sink that carries its own ``on_record_error`` (its configuration section's): what
    the chain does with a row the sink refuses (B28). A tier or tee passes on the policy
    of what it writes to. The pipeline's ``on_record_error`` wins when that is set."""

    on_record_error: ErrorPolicy


def sink_record_policy(sink: object) -> ErrorPolicy:
    """The record error policy ``sink`` declares (:class:`RecordPolicySink`), else FAIL."""
    if isinstance(sink, RecordPolicySink) and isinstance(sink.on_record_error, ErrorPolicy):
        return sink.on_record_error
    return ErrorPolicy.FAIL


def takes_rows(sink: Sink) -> bool:
    """Whether the chain hands ``sink`` a source batch's rows at once (B95); a sink that
    does not implement :class:`RowBatchSink` gets one :meth:`Sink.offer` per row."""
    return isinstance(sink, RowBatchSink) and sink.takes_rows is True


def takes_frames(sink: Sink) -> bool:
    """Whether ``sink`` takes frames now (:class:`FrameSink` with ``takes_frames``)."""
    return isinstance(sink, FrameSink) and sink.takes_frames is True


def frame_needs_keys(sink: Sink) -> bool:
    """Whether ``sink`` needs the records' keys with a frame (a router placing by key)."""
    return isinstance(sink, FrameSink) and sink.frame_needs_keys is True


def frame_sink(sink: Sink, who: str) -> FrameSink:
    """``sink`` as a :class:`FrameSink`, for a caller (``who``) that was handed a frame
    for it; ``SinkError`` (fatal) when it does not declare one — a composition the chain
    compiler refuses, so reaching it is a defect."""
    if not isinstance(sink, FrameSink):
        raise SinkError(
            f"{who}: sink {sink.name} takes no frames (it does not implement FrameSink)",
            ErrorClass.FATAL,
        )
    return sink


def records_intents(sink: object) -> bool:
    """Whether ``sink`` records block intents (:class:`EffectivelyOnceSink`, B90)."""
    return isinstance(sink, EffectivelyOnceSink) and sink.effectively_once is True


def decodes_columns(deserializer: object) -> bool:
    """Whether ``deserializer`` can decode batches as columns now: a
    :class:`BatchDeserializer` with its columnar decoder present."""
    return isinstance(deserializer, BatchDeserializer) and deserializer.columnar is not None


def flush_lanes(sink: Sink, lanes: Collection[Lane], deadline: float) -> bool:
    """Write out what ``sink`` holds of ``lanes``: its ``flush_lanes`` when it is a
    :class:`LaneFlushingSink`, else everything (:meth:`Sink.flush`, for sinks written
    without per-lane flush)."""
    if isinstance(sink, LaneFlushingSink):
        return sink.flush_lanes(lanes, deadline)
    return sink.flush(deadline)
