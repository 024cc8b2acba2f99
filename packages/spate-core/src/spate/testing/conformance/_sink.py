"""``SinkConformance``: the promises every sink connector keeps, checked on the real thing.

Two levels, both against the connector's real destination (a file, an embedded
database, a local server — never a mock standing in for it):

* the **sink** the factory builds, driven the way the runtime drives it — ``start``,
  ``offer`` with ack tokens, ``flush`` / ``abandon`` / ``close``: ``ready()`` once
  started (B22); an ack resolves delivered only when its rows can be read back (B2);
  tearing down without a write fails the acks held (B4); a row that cannot be written
  is refused at ``offer`` with ``SinkError(RECORD)`` holding nothing (B28); an
  unreachable endpoint fails ``start`` naming it (B29); each holder releases an ack
  once — a second release is caught by the token and fails the test (B39);
  ``flush_lanes([lane])``, when the sink has it, writes every row of that lane (B40);
  a sink that takes a source batch's rows at once (:class:`~spate.sink.RowBatchSink`)
  or a frame (:class:`~spate.sink.FrameSink`) names the rows it cannot write by their
  positions and holds nothing while preparing (B28, B95), takes the rest all or nothing,
  refuses the whole while it is full — during an :meth:`SinkConformance.outage` —
  retaining nothing, and takes the same batch again once it has room (B7, B8);
* the pool **connector** (:class:`~spate.sink.SinkConnector`), when the subclass
  returns one from :meth:`SinkConformance.open_connector`: ``write`` returns only once
  the rows are durable (B2); a retry of the same :class:`~spate.sink.WriteBatch` (same
  buffer, same token) resends the same rows, and lands them once when the connector
  declares :attr:`SinkConformance.dedup_by_token` (B9); a transient failure raises
  ``SinkError(RETRYABLE)`` and the same batch lands afterwards (B12); a bad row leaves
  the buffer unchanged (B28).

Plus the config convention of :class:`~spate.testing.conformance.ConfigConformance`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from spate.checkpoint._ack import AckStatus, AckToken
from spate.errors import AckError, ErrorClass, SinkError, SpateError
from spate.records import Lane
from spate.sink._contract import (
    FrameSink,
    LaneFlushingSink,
    Offer,
    RowBatchSink,
    Sink,
    flush_lanes,
    takes_frames,
    takes_rows,
)
from spate.sink._writer import ShardWriter, SinkConnector, WriteBatch
from spate.testing.conformance._base import (
    ConfigConformance,
    ConformanceFailure,
    Promise,
    check,
    conformance_context,
    count_of,
    missing_from,
    skip,
)

SINK_DURABLE = Promise(
    "B2", "a sink reports rows written (ack delivered, write returned) only once they are durable"
)
SINK_TEARDOWN = Promise(
    "B4", "tearing a sink down without a successful write fails the acks it holds"
)
SINK_RETRY = Promise("B9", "a retry resends the same rows under the same dedup token")
SINK_TRANSIENT = Promise(
    "B12",
    "a transient failure raises SinkError(RETRYABLE) and the same batch lands once it passes",
)
SINK_RECORD = Promise(
    "B28", "a row that cannot be written is refused on append with SinkError(RECORD), held nowhere"
)
SINK_ENDPOINT = Promise("B29", "an unreachable endpoint fails start-up with an error naming it")
SINK_READY = Promise("B22", "ready() is true once start() has probed every endpoint")
SINK_RELEASE_ONCE = Promise(
    "B39",
    "a sink releases each ack it retained exactly once, naming itself as the holder "
    "(a second release would resolve the batch while another holder still writes)",
)
SINK_LANES = Promise(
    "B40",
    "flush_lanes(lanes) returns true only once every row of those lanes is durable",
)

SINK_REFUSAL = Promise(
    "B7",
    "a full sink refuses a whole batch (REJECTED) retaining nothing, and takes the same "
    "batch again once it has room",
)
SINK_BATCHES = Promise(
    "B95",
    "a sink taking a batch at once names the rows it cannot write by their positions, "
    "holds nothing while preparing, and takes the rest all or nothing",
)

_LANES = (Lane("conformance", 0), Lane("conformance", 1))

_Prepare = Callable[[list[object], list[bytes]], tuple[object, list[tuple[int, str]]]]
_OfferBatch = Callable[[object, list[bytes], Lane, AckToken], Offer]


class SinkConformance(ConfigConformance):
    """Subclass as ``Test<Name>SinkConformance`` and fill in the hooks.

    Required: :attr:`factory` and :attr:`tag`, :meth:`config` (a sink over a fresh,
    empty destination — it is called once per test, inside :attr:`workdir` if you
    like), :meth:`rows` and :meth:`written`. Optional: :meth:`open_connector` (the
    connector-level tests), :meth:`bad_rows`, :meth:`unreachable`, :meth:`outage`,
    :meth:`invalid_configs`, and :attr:`dedup_by_token`.
    """

    section: ClassVar[str] = "sink"
    dedup_by_token: ClassVar[bool] = False
    """True when a batch written twice under one token lands once (ClickHouse, SQLite)."""
    rows_per_test: ClassVar[int] = 40
    """Rows each test writes (spread over four source batches on two lanes)."""
    patience: ClassVar[float] = 60.0
    """Seconds a flush may take before the test gives up."""

    # -- hooks ----------------------------------------------------------------------

    def rows(self, count: int) -> list[object]:
        """``count`` distinct rows the sink accepts, in the form the chain hands it."""
        raise NotImplementedError

    def written(self) -> list[object]:
        """Every row now in the destination, comparable with ``==`` to :meth:`rows`."""
        raise NotImplementedError

    def bad_rows(self) -> Sequence[object]:
        """Rows the sink must refuse on append (wrong arity, a value of the wrong type)."""
        return ()

    def open_connector(self) -> tuple[SinkConnector, str] | None:
        """The pool connector over the destination of :meth:`config`, and its endpoint."""
        return None

    def frame(self, rows: Sequence[object]) -> object | None:
        """``rows`` as the frame the columnar path hands ``prepare_frame`` (a polars
        ``DataFrame`` with a ``__spate_row`` column numbering them from 0); None (the
        default) skips the frame tests of a :class:`~spate.sink.FrameSink`."""
        return None

    def bad_frame_rows(self) -> Sequence[object]:
        """Rows :meth:`frame` can hold but the sink must refuse per column (a value out of
        its column's range); empty by default."""
        return ()

    def unreachable(self) -> tuple[Mapping[str, object], str] | None:
        """A config body whose endpoint cannot be reached, and the text naming it."""
        return None

    def outage(self) -> AbstractContextManager[object] | None:
        """A context during which the connector's endpoint fails transiently."""
        return None

    # -- helpers --------------------------------------------------------------------

    def setup_method(self, method: object = None) -> None:
        super().setup_method(method)
        self._ack_faults: list[str] = []
        """Misuses of this test's ack tokens (a second release by one holder)."""

    def _token(self, lane: Lane, seq: int, next_offset: int, records: int) -> AckToken:
        """An ack token as the tracker makes it, held by the chain; misuse is recorded."""
        return AckToken(lane, 1, seq, next_offset, records, _ignore, self._fault)

    def _fault(self, token: AckToken, reason: str) -> None:
        self._ack_faults.append(reason)

    def _check_released_once(self, how: str) -> None:
        check(
            not self._ack_faults,
            SINK_RELEASE_ONCE,
            f"{how}: {len(self._ack_faults)} ack release(s) by a holder that did not hold the ack "
            f"(first: {self._ack_faults[0] if self._ack_faults else None}); retain with a holder "
            "object of the buffer and release once with the same holder",
        )

    def build_sink(self, body: Mapping[str, object] | None = None) -> Sink:
        """Decode ``body`` (default :meth:`config`) and build the sink with the factory."""
        config = self.decode_config(body)
        sink: Sink = self._factory().build(config, conformance_context(self.tag or "sink"))
        return sink

    def _offer_all(
        self, sink: Sink, rows: Sequence[object], batches: int = 4
    ) -> list[tuple[AckToken, list[object]]]:
        """Offer ``rows`` as ``batches`` source batches on two lanes, as the chain does."""
        held: list[tuple[AckToken, list[object]]] = []
        per = max(1, -(-len(rows) // batches))
        for seq, start in enumerate(range(0, len(rows), per)):
            chunk = list(rows[start : start + per])
            lane = _LANES[seq % 2]
            token = self._token(lane, seq, start + len(chunk), len(chunk))
            for i, row in enumerate(chunk):
                self._offer(sink, row, f"k{start + i}".encode(), lane, token)
            token.release(True)  # the chain is done with the batch
            held.append((token, chunk))
        return held

    def _offer(self, sink: Sink, row: object, key: bytes, lane: Lane, token: AckToken) -> None:
        deadline = time.monotonic() + self.patience
        while sink.offer(row, key, lane, token) is Offer.REJECTED:
            if time.monotonic() >= deadline:
                raise ConformanceFailure(
                    SINK_DURABLE, f"the sink kept refusing rows for {self.patience}s"
                )
            sink.tick()
            time.sleep(0.01)

    def _check_landed(self, held: list[tuple[AckToken, list[object]]], how: str) -> None:
        # Statuses first, destination second: writes may still be landing, and a batch
        # that resolves after the read must not be judged against it.
        delivered = [(t, chunk) for t, chunk in held if t.status is AckStatus.DELIVERED]
        got = self.written()
        for _token, chunk in delivered:
            missing = missing_from(chunk, got)
            check(
                not missing,
                SINK_DURABLE,
                f"{how}: the ack of a batch of {len(chunk)} rows resolved delivered, but "
                f"{len(missing)} of them are not in the destination (first missing: "
                f"{missing[0] if missing else None!r}); release acks with ok=True only "
                "after the write is durable",
            )

    # -- sink level -----------------------------------------------------------------

    def test_b2_delivered_acks_mean_rows_in_the_destination(self) -> None:
        sink = self.build_sink()
        rows = self.rows(self.rows_per_test)
        sink.start()
        try:
            check(sink.ready(), SINK_READY, "ready() is false after a successful start()")
            held = self._offer_all(sink, rows)
            flushed = sink.flush(time.monotonic() + self.patience)
            check(
                flushed,
                SINK_DURABLE,
                f"flush() did not write everything within {self.patience}s with the destination up",
            )
            self._check_released_once("after flush()")
            pending = [t for t, _ in held if t.status is not AckStatus.DELIVERED]
            check(
                not pending,
                SINK_DURABLE,
                f"after a successful flush {len(pending)} acks are not delivered: {pending}",
            )
            self._check_landed(held, "after flush()")
            missing = missing_from(rows, self.written())
            check(
                not missing,
                SINK_DURABLE,
                f"{len(missing)} of {len(rows)} rows are missing after a successful flush",
            )
        finally:
            sink.close()

    def test_b4_abandon_fails_the_acks_it_holds(self) -> None:
        sink = self.build_sink()
        sink.start()
        try:
            held = self._offer_all(sink, self.rows(self.rows_per_test))
            sink.abandon()
            pending = [t for t, _ in held if t.status is AckStatus.PENDING]
            check(
                not pending,
                SINK_TEARDOWN,
                f"abandon() left {len(pending)} acks unresolved; fail them (ok=False)",
            )
            self._check_landed(held, "after abandon()")
            self._check_released_once("after abandon()")
        finally:
            sink.close()

    def test_b4_close_without_flush_fails_the_acks_it_holds(self) -> None:
        sink = self.build_sink()
        sink.start()
        held = self._offer_all(sink, self.rows(self.rows_per_test))
        sink.close()
        pending = [t for t, _ in held if t.status is AckStatus.PENDING]
        check(
            not pending,
            SINK_TEARDOWN,
            f"close() left {len(pending)} acks unresolved; fail them (ok=False)",
        )
        self._check_landed(held, "after close()")
        self._check_released_once("after close()")

    def test_b39_each_holder_releases_an_ack_once(self) -> None:
        """Many small source batches on two lanes, written by several flushes, then the
        teardown: every ack resolves once, and no holder releases twice (B4, B39)."""
        sink = self.build_sink()
        sink.start()
        rows = self.rows(self.rows_per_test)
        try:
            held = self._offer_all(sink, rows[: len(rows) // 2], batches=8)
            check(
                sink.flush(time.monotonic() + self.patience),
                SINK_DURABLE,
                f"flush() did not write everything within {self.patience}s",
            )
            held += self._offer_all(sink, rows[len(rows) // 2 :], batches=8)
            sink.tick()
            sink.abandon()
        except AckError as exc:
            raise ConformanceFailure(SINK_RELEASE_ONCE, str(exc)) from exc
        finally:
            try:
                sink.close()
            except AckError as exc:
                self._ack_faults.append(str(exc))
        self._check_released_once("after flush(), tick(), abandon() and close()")
        pending = [t for t, _ in held if t.status is AckStatus.PENDING]
        check(not pending, SINK_TEARDOWN, f"{len(pending)} acks left unresolved after close()")

    def test_b40_flush_lanes_writes_every_row_of_those_lanes(self) -> None:
        """What revocation relies on (B15): after ``flush_lanes([lane])`` every ack of
        that lane is delivered and its rows are in the destination. Sinks without
        ``flush_lanes`` are flushed in full on revocation; the test is skipped for them."""
        sink = self.build_sink()
        if not isinstance(sink, LaneFlushingSink):
            sink.close()
            raise skip(f"{type(self).__name__}: no flush_lanes(); revocation uses flush()")
        sink.start()
        try:
            rows = self.rows(self.rows_per_test)
            held = self._offer_all(sink, rows)
            revoked = _LANES[0]
            check(
                flush_lanes(sink, [revoked], time.monotonic() + self.patience),
                SINK_LANES,
                f"flush_lanes() did not write lane {revoked}'s rows within {self.patience}s",
            )
            of_lane = [(t, chunk) for t, chunk in held if t.lane == revoked]
            pending = [t for t, _ in of_lane if t.status is not AckStatus.DELIVERED]
            check(
                not pending,
                SINK_LANES,
                f"flush_lanes() returned true with {len(pending)} acks of the lane not "
                f"delivered: {pending}",
            )
            missing = missing_from([r for _, chunk in of_lane for r in chunk], self.written())
            check(
                not missing,
                SINK_LANES,
                f"after flush_lanes() {len(missing)} rows of the lane are not in the destination",
            )
            self._check_landed(held, "after flush_lanes()")
            check(
                flush_lanes(sink, [Lane("conformance", 99)], time.monotonic() + self.patience),
                SINK_LANES,
                "flush_lanes() of a lane the sink holds nothing of did not return true",
            )
            check(
                sink.flush(time.monotonic() + self.patience),
                SINK_DURABLE,
                "flush() after flush_lanes() did not write the rest",
            )
            missing = missing_from(rows, self.written())
            check(not missing, SINK_DURABLE, f"{len(missing)} rows missing after flush()")
            self._check_released_once("after flush_lanes() and flush()")
        finally:
            sink.close()

    def test_b28_bad_rows_are_refused_on_offer_and_hold_nothing(self) -> None:
        bad = list(self.bad_rows())
        if not bad:
            raise skip(f"{type(self).__name__} lists no bad_rows()")
        sink = self.build_sink()
        sink.start()
        try:
            lane = _LANES[0]
            token = self._token(lane, 0, 1, 1)
            for row in bad:
                _expect_record_error(
                    row,
                    lambda r: sink.offer(r, b"k", lane, token),
                    lambda r, result: f"{r!r} was taken ({result.name})",
                )
                check(
                    token.holders == 1,
                    SINK_RECORD,
                    f"refusing {row!r} left the ack retained ({token.holders - 1} extra holders)",
                )
            good = self.rows(1)[0]
            self._offer(sink, good, b"k", lane, token)
            token.release(True)
            check(
                sink.flush(time.monotonic() + self.patience),
                SINK_DURABLE,
                "flush() failed after refused rows",
            )
            check(
                token.status is AckStatus.DELIVERED,
                SINK_RECORD,
                f"a good row after refused ones did not deliver its ack ({token.status.name})",
            )
            check(
                count_of(good, self.written()) == 1,
                SINK_DURABLE,
                "the good row offered after the refused ones is not in the destination once",
            )
        finally:
            sink.close()

    def test_b29_unreachable_endpoint_fails_start_naming_it(self) -> None:
        case = self.unreachable()
        if case is None:
            raise skip(f"{type(self).__name__} gives no unreachable() endpoint")
        body, name = case
        sink = self.build_sink(body)
        try:
            sink.start()
        except SpateError as exc:
            check(
                name in str(exc),
                SINK_ENDPOINT,
                f"start() failed with {exc!r}, which does not name {name!r}",
            )
        except Exception as exc:
            raise ConformanceFailure(
                SINK_ENDPOINT,
                f"start() raised {type(exc).__name__} ({exc}); raise SinkError naming {name!r}",
            ) from exc
        else:
            raise ConformanceFailure(SINK_ENDPOINT, f"start() succeeded against {name!r}")
        finally:
            sink.close()

    # -- batches at once: offer_rows and offer_frame (B7, B8, B28, B95) -----------------

    def _batch_path(self, sink: Sink, kind: str) -> tuple[_Prepare, _OfferBatch, list[object]]:
        """How ``sink`` takes a batch of ``kind`` (``rows`` or ``frame``): prepare, offer,
        and the bad rows to mix in; skips when the sink does not declare it."""
        if kind == "rows":
            if not isinstance(sink, RowBatchSink) or not takes_rows(sink):
                raise skip(f"{type(self).__name__}: the sink takes no row batches (RowBatchSink)")
            rows_sink: RowBatchSink = sink

            def prepare_rows(
                rows: list[object], keys: list[bytes]
            ) -> tuple[object, list[tuple[int, str]]]:
                return rows_sink.prepare_rows(rows, list(keys), _LANES[0])

            def offer_rows(prepared: object, keys: list[bytes], lane: Lane, ack: AckToken) -> Offer:
                return rows_sink.offer_rows(prepared, lane, ack)

            return prepare_rows, offer_rows, list(self.bad_rows())
        if not isinstance(sink, FrameSink) or not takes_frames(sink):
            raise skip(f"{type(self).__name__}: the sink takes no frames (FrameSink)")
        if self.frame(self.rows(1)) is None:
            raise skip(f"{type(self).__name__} gives no frame()")
        frame_sink: FrameSink = sink

        def prepare_frame(
            rows: list[object], keys: list[bytes]
        ) -> tuple[object, list[tuple[int, str]]]:
            return frame_sink.prepare_frame(self.frame(rows))

        def offer_frame(prepared: object, keys: list[bytes], lane: Lane, ack: AckToken) -> Offer:
            return frame_sink.offer_frame(
                prepared, list(keys) if frame_sink.frame_needs_keys else None, lane, ack
            )

        return prepare_frame, offer_frame, list(self.bad_frame_rows())

    def _prepared(
        self, prepare: _Prepare, rows: list[object], bad: list[object], token: AckToken
    ) -> tuple[object, list[bytes]]:
        """Prepare ``rows`` with ``bad`` mixed in (every third position); check the bad
        ones come back by position and that preparing holds nothing. Returns the prepared
        batch and the keys of the rows it holds."""
        mixed: list[object] = []
        expected: list[int] = []
        pending = list(bad)
        for row in rows:
            if pending and len(mixed) % 3 == 1:
                expected.append(len(mixed))
                mixed.append(pending.pop(0))
            mixed.append(row)
        for row in pending:
            expected.append(len(mixed))
            mixed.append(row)
        keys = [f"k{i}".encode() for i in range(len(mixed))]
        holders = token.holders
        prepared, refused = prepare(mixed, keys)
        positions = [position for position, _ in refused]
        check(
            sorted(positions) == expected,
            SINK_BATCHES,
            f"the bad rows are at positions {expected}, but the sink named {sorted(positions)}",
        )
        check(
            all(isinstance(reason, str) and reason for _, reason in refused),
            SINK_BATCHES,
            f"every refused row needs its reason, got {refused!r}",
        )
        check(token.holders == holders, SINK_BATCHES, "preparing a batch retained its ack")
        kept = [k for i, k in enumerate(keys) if i not in set(expected)]
        return prepared, kept

    def _offer_batch(
        self, sink: Sink, offer: _OfferBatch, prepared: object, keys: list[bytes], token: AckToken
    ) -> None:
        deadline = time.monotonic() + self.patience
        while True:
            holders = token.holders
            if offer(prepared, keys, token.lane, token) is not Offer.REJECTED:
                return
            check(
                token.holders == holders,
                SINK_REFUSAL,
                f"a refused batch left its ack retained ({token.holders - holders} extra holders)",
            )
            if time.monotonic() >= deadline:
                raise ConformanceFailure(
                    SINK_REFUSAL, f"the sink kept refusing a batch for {self.patience}s"
                )
            sink.tick()
            time.sleep(0.01)

    def _check_batches(self, kind: str) -> None:
        sink = self.build_sink()
        try:
            prepare, offer, bad = self._batch_path(sink, kind)
            sink.start()
            rows = self.rows(self.rows_per_test)
            held: list[tuple[AckToken, list[object]]] = []
            per = max(1, len(rows) // 4)
            for seq, start in enumerate(range(0, len(rows), per)):
                chunk = rows[start : start + per]
                token = self._token(_LANES[seq % 2], seq, start + len(chunk), len(chunk))
                prepared, keys = self._prepared(prepare, chunk, bad if seq == 0 else [], token)
                self._offer_batch(sink, offer, prepared, keys, token)
                token.release(True)  # the chain is done with the batch
                held.append((token, chunk))
            self._flush_delivers(sink, held, f"after {kind} batches and flush()")
            got = self.written()
            counts = [count_of(row, got) for row in rows]
            check(
                min(counts) >= 1 and (max(counts) == 1 or not self.dedup_by_token),
                SINK_BATCHES,
                f"after {kind} batches the destination holds the rows {counts} times",
            )
            check(
                all(count_of(row, got) == 0 for row in bad),
                SINK_BATCHES,
                f"a refused row of a {kind} batch reached the destination",
            )
            self._check_released_once(f"after {kind} batches")
        finally:
            sink.close()

    def _flush_delivers(
        self, sink: Sink, held: list[tuple[AckToken, list[object]]], how: str
    ) -> None:
        """``flush()`` writes everything, every held ack is delivered, its rows landed."""
        check(
            sink.flush(time.monotonic() + self.patience),
            SINK_DURABLE,
            f"{how}: flush() did not write everything within {self.patience}s",
        )
        pending = [t for t, _ in held if t.status is not AckStatus.DELIVERED]
        check(
            not pending,
            SINK_DURABLE,
            f"{how}: after a successful flush {len(pending)} acks are not delivered: {pending}",
        )
        self._check_landed(held, how)

    def _check_refusal(self, kind: str) -> None:
        sink = self.build_sink()
        try:
            prepare, offer, _bad = self._batch_path(sink, kind)
            outage = self.outage()
            if outage is None:
                raise skip(f"{type(self).__name__} gives no outage()")
            sink.start()
            rows = self.rows(self.rows_per_test * 5)
            per = max(1, self.rows_per_test // 4)
            held: list[tuple[AckToken, list[object]]] = []
            refused: tuple[AckToken, list[object], object, list[bytes]] | None = None
            with outage:
                for seq, start in enumerate(range(0, len(rows), per)):
                    chunk = rows[start : start + per]
                    token = self._token(_LANES[seq % 2], seq, start + len(chunk), len(chunk))
                    prepared, keys = self._prepared(prepare, chunk, [], token)
                    holders = token.holders
                    if offer(prepared, keys, token.lane, token) is Offer.REJECTED:
                        check(
                            token.holders == holders,
                            SINK_REFUSAL,
                            "a refused batch left its ack retained",
                        )
                        refused = (token, chunk, prepared, keys)
                        break
                    token.release(True)
                    held.append((token, chunk))
                check(
                    refused is not None,
                    SINK_REFUSAL,
                    f"the sink took {len(held)} batches ({len(held) * per} rows) while its "
                    "destination was down and never refused one: a full sink must answer "
                    "REJECTED, not buffer without bound",
                )
            if refused is None:  # unreachable: the check above raised
                return
            token, chunk, prepared, keys = refused
            self._offer_batch(sink, offer, prepared, keys, token)  # the same batch again
            token.release(True)
            held.append((token, chunk))
            self._flush_delivers(sink, held, f"after a refused {kind} batch was offered again")
            missing = missing_from([r for _, c in held for r in c], self.written())
            check(
                not missing,
                SINK_REFUSAL,
                f"{len(missing)} rows of {kind} batches are missing after the outage",
            )
            self._check_released_once(f"after a refused {kind} batch")
        finally:
            sink.close()

    def test_b95_offer_rows_names_bad_rows_and_takes_the_rest_whole(self) -> None:
        """``prepare_rows``/``offer_rows`` of a :class:`~spate.sink.RowBatchSink` (B28, B95)."""
        self._check_batches("rows")

    def test_b7_offer_rows_refuses_a_whole_batch_while_full(self) -> None:
        """A full row-batch sink refuses, retains nothing, takes it again later (B7, B8)."""
        self._check_refusal("rows")

    def test_b95_offer_frame_names_bad_rows_and_takes_the_rest_whole(self) -> None:
        """``prepare_frame``/``offer_frame`` of a :class:`~spate.sink.FrameSink` (B28, B95)."""
        self._check_batches("frame")

    def test_b7_offer_frame_refuses_a_whole_frame_while_full(self) -> None:
        """A full frame sink refuses, retains nothing, takes it again later (B7, B8)."""
        self._check_refusal("frame")

    # -- connector level ------------------------------------------------------------

    def _connector(self) -> tuple[SinkConnector, str]:
        opened = self.open_connector()
        if opened is None:
            raise skip(f"{type(self).__name__} gives no open_connector()")
        return opened

    def _batch(
        self, connector: SinkConnector, rows: Sequence[object], seq: int = 1, attempt: int = 1
    ) -> WriteBatch:
        buffer = connector.new_buffer(0)
        sizes = [buffer.append(row) for row in rows]
        check(
            all(isinstance(s, int) and s > 0 for s in sizes),
            SINK_DURABLE,
            f"RowBuffer.append must return each row's estimated size in bytes, got {sizes[:5]}",
        )
        check(
            len(buffer) == len(rows),
            SINK_DURABLE,
            f"len(buffer) is {len(buffer)} after appending {len(rows)} rows",
        )
        return WriteBatch(buffer, len(rows), sum(sizes), 0, seq, f"conf-run-0-{seq}", attempt)

    def _writer(self, connector: SinkConnector, endpoint: str) -> ShardWriter:
        writer = connector.open_writer(0, 0, endpoint)
        writer.probe()
        return writer

    def test_b2_write_returns_only_once_rows_are_durable(self) -> None:
        connector, endpoint = self._connector()
        rows = self.rows(self.rows_per_test)
        batch = self._batch(connector, rows)
        writer = self._writer(connector, endpoint)
        try:
            writer.write(batch)
            missing = missing_from(rows, self.written())
            check(
                not missing,
                SINK_DURABLE,
                f"write() returned but {len(missing)} of {len(rows)} rows are not in the "
                f"destination (first missing: {missing[0] if missing else None!r})",
            )
            check(
                len(batch.buffer) == len(rows),
                SINK_RETRY,
                f"write() emptied the buffer ({len(batch.buffer)} of {len(rows)} rows left): "
                "the pool retries with the same buffer, so it must keep its rows",
            )
        finally:
            writer.close()

    def test_b9_a_retry_resends_the_same_batch(self) -> None:
        connector, endpoint = self._connector()
        rows = self.rows(self.rows_per_test)
        first = self._batch(connector, rows, seq=7)
        retry = WriteBatch(
            first.buffer, first.rows, first.nbytes, first.shard, first.seq, first.token, 2
        )
        writer = self._writer(connector, endpoint)
        try:
            writer.write(first)  # the rows land, the answer is "lost" …
            writer.write(retry)  # … so the pool sends the same batch again
            got = self.written()
            counts = [count_of(row, got) for row in rows]
            check(
                min(counts) >= 1,
                SINK_RETRY,
                f"after a write and its retry, {counts.count(0)} rows are missing",
            )
            if self.dedup_by_token:
                check(
                    max(counts) == 1,
                    SINK_RETRY,
                    "a batch written twice under one token landed twice, but the connector "
                    "declares dedup_by_token",
                )
                # Deduplication is by token, never by content: equal rows of another
                # batch are new data.
                again = self._batch(connector, rows, seq=8)
                writer.write(again)
                got = self.written()
                check(
                    all(count_of(row, got) == 2 for row in rows),
                    SINK_RETRY,
                    "a new batch (new token) with the same rows as an earlier one was dropped: "
                    "deduplicate by token, not by content",
                )
        finally:
            writer.close()

    def test_b12_transient_failure_is_retryable_and_the_batch_lands_after(self) -> None:
        connector, endpoint = self._connector()
        writer = self._writer(connector, endpoint)
        try:
            outage = self.outage()
            if outage is None:
                raise skip(f"{type(self).__name__} gives no outage()")
            rows = self.rows(self.rows_per_test)
            batch = self._batch(connector, rows)
            with outage:
                try:
                    writer.write(batch)
                except SinkError as exc:
                    check(
                        exc.error_class is ErrorClass.RETRYABLE,
                        SINK_TRANSIENT,
                        f"a transient failure raised SinkError({exc.error_class.name})",
                    )
                except Exception as exc:
                    raise ConformanceFailure(
                        SINK_TRANSIENT,
                        f"a transient failure raised {type(exc).__name__} ({exc}); translate "
                        "client errors into SinkError at the connector's boundary",
                    ) from exc
                else:
                    raise ConformanceFailure(SINK_TRANSIENT, "write() returned during the outage")
            retry = WriteBatch(
                batch.buffer, batch.rows, batch.nbytes, batch.shard, batch.seq, batch.token, 2
            )
            writer.write(retry)
            got = self.written()
            counts = [count_of(row, got) for row in rows]
            check(
                min(counts) >= 1,
                SINK_TRANSIENT,
                f"{counts.count(0)} rows are missing after the retry",
            )
            if self.dedup_by_token:
                check(max(counts) == 1, SINK_RETRY, "rows landed twice under one token")
        finally:
            writer.close()

    def test_b28_bad_rows_leave_the_buffer_unchanged(self) -> None:
        bad = list(self.bad_rows())
        if not bad:
            raise skip(f"{type(self).__name__} lists no bad_rows()")
        connector, endpoint = self._connector()
        good = self.rows(2)
        buffer = connector.new_buffer(0)
        buffer.append(good[0])
        for row in bad:
            _expect_record_error(row, buffer.append, lambda r, _: f"the buffer took {r!r}")
            check(
                len(buffer) == 1,
                SINK_RECORD,
                f"refusing {row!r} changed the buffer (len {len(buffer)})",
            )
        size = buffer.append(good[1])
        writer = self._writer(connector, endpoint)
        try:
            writer.write(WriteBatch(buffer, 2, 2 * size, 0, 1, "conf-run-0-1", 1))
        finally:
            writer.close()
        got = self.written()
        check(
            not missing_from(good, got) and len(got) == 2,
            SINK_RECORD,
            f"after refused rows the destination holds {got!r}, expected {good!r}",
        )


def _ignore(token: AckToken) -> None:
    """Resolver of the suite's ack tokens: the suite reads ``token.status`` instead."""


def _expect_record_error(
    row: object, take: Callable[[object], Any], taken: Callable[[object, Any], str]
) -> None:
    """``take(row)`` must raise ``SinkError(RECORD)``; ``taken(row, result)`` says otherwise."""
    try:
        result = take(row)
    except SinkError as exc:
        check(
            exc.error_class is ErrorClass.RECORD,
            SINK_RECORD,
            f"{row!r} raised SinkError({exc.error_class.name}), expected RECORD",
        )
    except Exception as exc:
        raise ConformanceFailure(
            SINK_RECORD, f"{row!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    else:
        raise ConformanceFailure(SINK_RECORD, taken(row, result))
