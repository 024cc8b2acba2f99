"""Driving a Parquet sink the way the runtime does, with the commit watermark a source sees."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate._clock import Clock
from spate.checkpoint._ack import AckStatus, AckToken
from spate.config import decode
from spate.records import Lane
from spate.sink import Offer
from spate.testing.conformance import conformance_context
from spate_parquet import ParquetSink, ParquetSinkConfig, S3Store, build_sink


def make_sink(
    body: Mapping[str, Any], name: str = "lake", clock: Clock | None = None, io_threads: int = 1
) -> ParquetSink:
    """``io_threads=0``: files are written inline, on the caller's thread."""
    config = decode(ParquetSinkConfig, dict(body), "sinks.lake.parquet")
    sink = build_sink(config, conformance_context(name, clock=clock, io_threads=io_threads))
    sink.start()
    return sink


def lake_store(lake: tuple[Any, str, str]) -> S3Store:
    """An :class:`S3Store` under ``s3://{bucket}/lake`` of the ``lake`` fixture."""
    _, name, endpoint = lake
    config = decode(
        ParquetSinkConfig,
        {"path": f"s3://{name}/lake", "s3": {"endpoint_url": endpoint}},
        "parquet",
    )
    return S3Store(config)


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
        self._offer_whole(lambda: self.sink.offer_frame(table, None, lane, token), lane, token)
        return token, bad

    def _offer_whole(self, offer: Callable[[], Offer], lane: Lane, token: AckToken) -> None:
        """Offer a batch whole until the sink takes it (ticking meanwhile), then settle."""
        deadline = time.monotonic() + 60
        while offer() is Offer.REJECTED:
            assert time.monotonic() < deadline, "the sink refused the batch for 60s"
            self.sink.tick()
            time.sleep(0.005)
        token.release(True)
        self.tokens.setdefault(lane, []).append(token)

    def rows_batch(
        self, lane: Lane, start: int, rows: Sequence[object]
    ) -> tuple[AckToken, list[tuple[int, str]]]:
        """Offer ``rows`` as one source batch through the row chain's batch offer
        (``prepare_rows`` then ``offer_rows``). Returns the token and the refused rows."""
        self._seq += 1
        token = AckToken(lane, 1, self._seq, start + len(rows), len(rows), _ignore)
        prepared, bad = self.sink.prepare_rows(list(rows), [None] * len(rows), lane)
        self._offer_whole(lambda: self.sink.offer_rows(prepared, lane, token), lane, token)
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


BASE = dt.datetime(2026, 12, 1, 4, 50, tzinfo=dt.UTC)
LAYOUT_SCHEMA = {
    "id": "int64",
    "country": "string",
    "amount": "float64",
    "ts": "timestamp[ms, tz=UTC]",
}
LAYOUTS: list[dict[str, Any]] = [
    {"schema": LAYOUT_SCHEMA, "max_records": 37},
    {"schema": LAYOUT_SCHEMA, "max_records": 50, "partition_by": ["country"]},
    {
        "schema": LAYOUT_SCHEMA,
        "max_records": 1000,
        "window": "1h",
        "time_column": "ts",
        "time_partitions": "dt=%Y-%m-%d/hour=%H",
        "partition_by": ["country"],
    },
]
"""Layouts the path-equivalence properties run over: size cuts, partitions, windows."""


def layout_rows(count: int, minutes: int = 1) -> list[dict[str, Any]]:
    """Rows of :data:`LAYOUT_SCHEMA`, ``minutes`` apart, in three countries."""
    return [
        {
            "id": i,
            "country": ("DE", "FR", "PL")[(i // 4) % 3],
            "amount": i * 0.5,
            "ts": BASE + dt.timedelta(minutes=i * minutes),
        }
        for i in range(count)
    ]


def any_batching(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test(count, sizes, max_records, minutes, layout)`` over random batchings."""
    strategies = given(
        count=st.integers(1, 200),
        sizes=st.lists(st.integers(1, 60), min_size=1, max_size=4),
        max_records=st.integers(1, 90),
        minutes=st.integers(0, 7),
        layout=st.sampled_from(range(len(LAYOUTS))),
    )
    runs = settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    return runs(strategies(test))  # type: ignore[no-any-return]


def write_fed(
    root: Path,
    body: Mapping[str, Any],
    rows: list[dict[str, Any]],
    sizes: list[int],
    *,
    frames: bool = False,
    batched: bool = False,
) -> dict[str, bytes]:
    """Feed ``rows`` to a fresh sink under ``root`` in batches of ``sizes``; the files."""
    from .readback import local_files

    sink = make_sink({"path": str(root), **body})
    Feeder(sink).feed(Lane("orders", 3), rows, 0, sizes, frames=frames, batched=batched)
    assert sink.flush(float("inf"))
    sink.close()
    return local_files(root)
