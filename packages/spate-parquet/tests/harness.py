"""Driving a Parquet sink the way the runtime does, with the commit watermark a source sees."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from spate._clock import Clock
from spate.checkpoint._ack import AckStatus, AckToken
from spate.config import decode
from spate.records import Lane
from spate.sink import Offer
from spate.testing.conformance import conformance_context
from spate_parquet import ParquetSink, ParquetSinkConfig, build_sink


def make_sink(
    body: Mapping[str, Any], name: str = "lake", clock: Clock | None = None
) -> ParquetSink:
    config = decode(ParquetSinkConfig, dict(body), "sinks.lake.parquet")
    sink = build_sink(config, conformance_context(name, clock=clock))
    sink.start()
    return sink


def _ignore(token: AckToken) -> None:
    """The harness reads ``token.status`` instead."""


class Feeder:
    """Offers rows of each lane as source batches and tracks what may be committed."""

    def __init__(self, sink: ParquetSink) -> None:
        self.sink = sink
        self.tokens: dict[Lane, list[AckToken]] = {}
        self._seq = 0

    def batch(
        self, lane: Lane, start: int, rows: Sequence[dict[str, Any]], records: int | None = None
    ) -> AckToken:
        """Offer ``rows`` as one source batch of ``lane`` starting at offset ``start``.

        The batch holds ``records`` records (default: one per row).
        """
        self._seq += 1
        held = len(rows) if records is None else records
        token = AckToken(lane, 1, self._seq, start + held, held, _ignore)
        for row in rows:
            deadline = time.monotonic() + 60
            while self.sink.offer(row, None, lane, token) is Offer.REJECTED:
                assert time.monotonic() < deadline, "the sink refused rows for 60s"
                self.sink.tick()
                time.sleep(0.005)
        token.release(True)
        self.tokens.setdefault(lane, []).append(token)
        return token

    def frame_batch(
        self,
        lane: Lane,
        start: int,
        rows: Sequence[dict[str, Any]],
        records: int | None = None,
        indexes: Sequence[int] | None = None,
    ) -> tuple[AckToken, list[tuple[int, str]]]:
        """Offer ``rows`` as one source batch on the columnar path: a polars frame with
        each row's record index (``indexes``, default 0..n-1), prepared by the sink and
        offered whole. Returns the token and the rows the sink refused."""
        import polars as pl

        self._seq += 1
        held = len(rows) if records is None else records
        token = AckToken(lane, 1, self._seq, start + held, held, _ignore)
        frame = pl.DataFrame(list(rows)) if rows else pl.DataFrame()
        positions = list(range(len(rows))) if indexes is None else list(indexes)
        frame = frame.with_columns(pl.Series("__spate_row", positions, dtype=pl.Int64))
        table, bad = self.sink.prepare_frame(frame)
        deadline = time.monotonic() + 60
        while self.sink.offer_frame(table, None, lane, token) is Offer.REJECTED:
            assert time.monotonic() < deadline, "the sink refused the frame for 60s"
            self.sink.tick()
            time.sleep(0.005)
        token.release(True)
        self.tokens.setdefault(lane, []).append(token)
        return token, bad

    def rows_batch(
        self, lane: Lane, start: int, rows: Sequence[object]
    ) -> tuple[AckToken, list[tuple[int, str]]]:
        """Offer ``rows`` as one source batch through the row chain's batch offer
        (``prepare_rows`` then ``offer_rows``). Returns the token and the refused rows."""
        self._seq += 1
        token = AckToken(lane, 1, self._seq, start + len(rows), len(rows), _ignore)
        prepared, bad = self.sink.prepare_rows(list(rows), [None] * len(rows), lane)
        deadline = time.monotonic() + 60
        while self.sink.offer_rows(prepared, lane, token) is Offer.REJECTED:
            assert time.monotonic() < deadline, "the sink refused the rows for 60s"
            self.sink.tick()
            time.sleep(0.005)
        token.release(True)
        self.tokens.setdefault(lane, []).append(token)
        return token, bad

    def feed(
        self,
        lane: Lane,
        rows: Sequence[dict[str, Any]],
        start: int,
        sizes: Sequence[int],
        frames: bool = False,
        batched: bool = False,
    ) -> None:
        """Offer ``rows[start:]`` in batches of the given sizes (cycled), as rows, as
        frames (the columnar path) or as batches of rows (``prepare_rows``/``offer_rows``)."""
        i, k = start, 0
        while i < len(rows):
            size = sizes[k % len(sizes)]
            if batched:
                self.rows_batch(lane, i, rows[i : i + size])
            elif frames:
                self.frame_batch(lane, i, rows[i : i + size])
            else:
                self.batch(lane, i, rows[i : i + size])
            i += size
            k += 1

    def committed(self, lane: Lane) -> int:
        """The next offset a source would commit: the end of the delivered prefix."""
        position = 0
        for token in self.tokens.get(lane, []):
            if token.status is not AckStatus.DELIVERED:
                break
            position = token.next_offset
        return position
