"""The connector-facing side of the sink pool: what a sink connector implements.

A sink connector (ClickHouse, Kafka, SQLite, …) writes only two things; the
:class:`~spate.sink.SinkPool` does everything else (routing, batching, sealing,
in-flight limits, retries with the same dedup token, circuit breakers, failover inside a
shard, acks, the byte budget, metrics and threads — docs/concepts/sinks.md):

* a :class:`RowBuffer` per open batch: ``append(row)`` checks or converts one row and
  adds it, returning an estimate of its in-memory size. A value that cannot be written
  raises ``SinkError(..., ErrorClass.RECORD)`` *here*, at append time, and leaves the
  buffer unchanged, so one bad value follows the record policy instead of failing a
  whole block later (B28);
* a :class:`ShardWriter` per endpoint (one replica of one shard): ``write(batch)``
  sends a sealed buffer and returns once it is durably written, or raises
  ``SinkError`` with ``RETRYABLE`` (network, overload, timeouts) or ``FATAL`` (retrying
  cannot help); ``probe()`` checks the endpoint at start-up and raises naming it (B29).

The pool calls ``write`` on its worker threads, never on the pipeline thread, and never
twice at once for the same batch. A retried batch is the same buffer with the same
``token`` (B9): connectors send the token as their server's deduplication token
(ClickHouse ``insert_deduplication_token``), and ``write`` must leave the buffer as it
found it so that a retry sends the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from spate.errors import ErrorClass, SinkError


class RowBuffer(Protocol):
    """The rows of one batch for one shard, in the connector's own form."""

    def append(self, row: object) -> int:
        """Add one row; return its estimated in-memory size in bytes.

        Raise ``SinkError(reason, ErrorClass.RECORD)`` for a row that cannot be written,
        leaving the buffer as it was. Called on the pipeline thread; must not block.
        """
        ...

    def __len__(self) -> int:
        """Rows held."""
        ...


@runtime_checkable
class RowBlock(Protocol):
    """Rows a connector checked at once (``prepare_rows``, B95), ready for its buffers.

    A connector whose buffers take blocks is a :class:`RowBatchConnector` and its
    buffers are :class:`RowBlockBuffer` s.
    """

    def __len__(self) -> int:
        """Rows held."""
        ...

    def take(self, positions: Sequence[int]) -> RowBlock:
        """The rows at ``positions``, in that order."""
        ...

    def slice(self, start: int, stop: int) -> RowBlock:
        """Rows ``start`` to ``stop`` (excluded)."""
        ...


@runtime_checkable
class RowBlockBuffer(Protocol):
    """A :class:`RowBuffer` that also takes a :class:`RowBlock` at once (B95)."""

    def append_rows(self, block: RowBlock) -> int:
        """Add the block's rows; return their estimated size in bytes. Pipeline thread."""
        ...


@runtime_checkable
class FrameBuffer(Protocol):
    """A :class:`RowBuffer` that also takes a prepared frame (the columnar path)."""

    def append_frame(self, frame: object) -> int:
        """Add the frame's rows; return their size in bytes. Pipeline thread."""
        ...


@dataclass(frozen=True, slots=True)
class WriteBatch:
    """A sealed batch as a writer sees it, for one write attempt."""

    buffer: RowBuffer
    rows: int
    nbytes: int
    """The pool's estimate of the rows' in-memory size (not the encoded size)."""
    shard: int
    seq: int
    """Sequence number of the batch within its shard and process run, from 1."""
    token: str
    """Deduplication token ``{pipeline}-{run_nonce}-{shard}-{seq}``; the same on every retry."""
    attempt: int
    """1 for the first attempt, 2 for the first retry, …"""


@dataclass(frozen=True, slots=True)
class RefusedRow:
    """One row of a batch the destination refused on its own, at write time."""

    row: int
    """The row's position in the batch (the order the pool appended it)."""
    reason: str
    """Why, for the log and the dead letter's message (the server's code and message)."""
    fields: tuple[tuple[str, str], ...] = ()
    """Error fields a dead letter carries besides the usual ones (Kafka headers
    ``spate.error.<name>``), e.g. ``(("code", "469"), ("code.name", "VIOLATED_CONSTRAINT"))``."""


class RowError(SinkError):
    """The record error of one row refused at write time, as the chain charges it to the
    row's record (B245): a :class:`~spate.errors.SinkError` (``RECORD``) with the
    :attr:`RefusedRow.fields` its dead letter carries."""

    def __init__(self, reason: str, fields: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(reason, ErrorClass.RECORD)
        self.fields = fields


class RowsRefused(SinkError):
    """Raised by :meth:`ShardWriter.write` when every row of the batch is written except
    :attr:`rows`, which the destination refused on their own (B245).

    Only a :class:`RowRefusingConnector` whose ``refuses_rows`` is set raises it: the
    pool then charges each refused row to its own record through the chain's record
    policy (:mod:`spate.sink._held`: a dead letter with the row's source ack) on the
    pipeline thread, and settles the batch once every one is charged.

    ``skipped`` says the writer already logged and counted the rows under
    ``on_record_error: skip``: the pool charges them to their records only to name their
    source positions (B349), and a batch whose records it does not know counts as
    written rather than failed.
    """

    def __init__(self, reason: str, rows: tuple[RefusedRow, ...], *, skipped: bool = False) -> None:
        super().__init__(reason, ErrorClass.RECORD)
        self.rows = rows
        self.skipped = skipped


class RowsFailed(SinkError):
    """Raised by :meth:`ShardWriter.write` when every row of the batch is written except
    rows the destination refused on their own, under ``on_record_error: fail``: the
    batch fails for good (fatal), since writing it again meets the same refusal. A spool
    with ``ack: spooled`` keeps such a batch and stops instead of retrying it (B322)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, ErrorClass.FATAL)


class ShardWriter(Protocol):
    """Writes sealed batches to one endpoint (one replica of one shard)."""

    endpoint: str

    def probe(self) -> None:
        """Check the endpoint is reachable and usable; raise ``SinkError`` naming it (B29).

        Called once at start-up, before anything is consumed. May block.
        """
        ...

    def write(self, batch: WriteBatch) -> None:
        """Write ``batch`` durably, or raise ``SinkError`` (RETRYABLE or FATAL), or
        :class:`RowsRefused` once every other row is written (a
        :class:`RowRefusingConnector`'s writer only).

        Called on a sink worker thread; may block (network waits release the GIL).
        """
        ...

    def close(self) -> None:
        """Release the connection. Called once when the pool closes."""
        ...


class SinkConnector(Protocol):
    """What a sink connector hands the pool: buffers and per-endpoint writers."""

    def new_buffer(self, shard: int) -> RowBuffer:
        """A fresh, empty buffer for the next batch of ``shard`` (pipeline thread)."""
        ...

    def open_writer(self, shard: int, replica: int, endpoint: str) -> ShardWriter:
        """The writer for ``endpoint``, replica ``replica`` of ``shard``. Called at start."""
        ...


@runtime_checkable
class RowRefusingConnector(Protocol):
    """A :class:`SinkConnector` whose writers may raise :class:`RowsRefused` (B245).

    ``refuses_rows`` says whether they do now (the ClickHouse sink under
    ``on_record_error: dead_letter`` or ``skip``, B349). The pool then keeps each
    buffered row's record (its source batch, index and ack — under ``skip`` only a batch
    of the source batch's lane and offsets, B349), so a row refused at write time can be
    charged to its own record; the cost is one small tuple per row, paid only while it
    is set.
    """

    refuses_rows: bool

    def new_buffer(self, shard: int) -> RowBuffer:
        """As :meth:`SinkConnector.new_buffer`."""
        ...


def estimate_row_bytes(row: object) -> int:
    """A cheap estimate of a row's in-memory size (tuples, dicts, bytes, str, numbers).

    Python objects are several times larger than their wire form (a 7-byte Avro record
    becomes a ~130-byte tuple); the byte budget bounds memory, so this estimates memory.
    """
    kind = type(row)
    if kind is tuple or kind is list:
        return 56 + 40 * len(row)  # type: ignore[arg-type]
    if kind is dict:
        return 232 + 72 * len(row)  # type: ignore[arg-type]
    if kind is bytes or kind is str or kind is bytearray:
        return 49 + len(row)  # type: ignore[arg-type]
    if isinstance(row, (tuple, list)):
        return 56 + 40 * len(row)
    if isinstance(row, dict):
        return 232 + 72 * len(row)
    return 64


class ListRowBuffer:
    """A :class:`RowBuffer` that keeps rows in a list, after an optional per-row check.

    ``check(row)`` converts or validates one row and returns the form to keep; it raises
    ``SinkError(RECORD)`` (or any exception, reported as a record error) for a row that
    cannot be written. Each row's size is ``row_bytes`` when given (cheapest, for
    connectors whose rows all look alike), else ``estimate(row)``.
    """

    __slots__ = ("_check", "_estimate", "_row_bytes", "rows")

    def __init__(
        self,
        check: Callable[[object], object] | None = None,
        estimate: Callable[[object], int] = estimate_row_bytes,
        row_bytes: int = 0,
    ) -> None:
        self.rows: list[object] = []
        self._check = check
        self._estimate = estimate
        self._row_bytes = row_bytes

    def append(self, row: object) -> int:
        if self._check is not None:
            row = self._checked(row)
        self.rows.append(row)
        return self._row_bytes or self._estimate(row)

    def _checked(self, row: object) -> object:
        check = self._check
        if check is None:
            return row
        try:
            return check(row)
        except SinkError:
            raise
        except Exception as exc:
            raise SinkError(f"cannot encode row: {exc!r}", ErrorClass.RECORD) from exc

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[object]:
        return iter(self.rows)


@runtime_checkable
class RowBatchConnector(Protocol):
    """A :class:`SinkConnector` that checks a source batch's rows at once (B95); its
    buffers are :class:`RowBlockBuffer` s. ``takes_rows`` says whether it does so now."""

    takes_rows: bool

    def new_buffer(self, shard: int) -> RowBuffer:
        """As :meth:`SinkConnector.new_buffer`."""
        ...

    def prepare_rows(self, rows: list[object]) -> tuple[RowBlock, list[tuple[int, Exception]]]:
        """Check ``rows``: ``(block, refused)`` — ``refused`` lists ``(position,
        exception)`` for the rows it cannot write, the exception a per-row
        :meth:`RowBuffer.append` would raise. Holds nothing; pipeline thread."""
        ...


@runtime_checkable
class FrameConnector(Protocol):
    """A :class:`SinkConnector` that takes frames (the columnar path); its buffers are
    :class:`FrameBuffer` s. ``takes_frames`` says whether it does so now."""

    takes_frames: bool

    def new_buffer(self, shard: int) -> RowBuffer:
        """As :meth:`SinkConnector.new_buffer`."""
        ...

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """Check ``frame`` per column: ``(frame to append, bad rows as (position, reason))``."""
        ...

    def take_rows(self, frame: object, rows: list[int]) -> object:
        """The rows of a prepared frame at ``rows``, in that order (a shard's part)."""
        ...
