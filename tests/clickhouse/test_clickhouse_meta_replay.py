"""Metadata columns under ``delivery: effectively_once`` on the ClickHouse HTTP front:
a later run replaying from an older offset rebuilds the same rows, so a plain
``MergeTree`` holds each record once with its own offset, header and timestamp (B255)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest
from spate import AckToken, Lane
from spate.metrics._meter import Meter
from spate.ops import compile_chain
from spate.records import Headers, PayloadBatch

from tests.clickhouse.test_clickhouse_effectively_once import eo_sink
from tests.support.chfront_fixtures import ChFront

pytestmark = [pytest.mark.integration]

LANE = Lane("orders", 3)
COLUMNS: list[Any] = [
    "id",
    "offset",
    {"kafka_offset": "$offset"},
    {"tenant": "$header.tenant"},
    {"ts": "$timestamp"},
]


class IntDeser:
    many = False

    def deserialize(self, payload: memoryview) -> object:
        return int(bytes(payload))


def offsets_batch(first: int, stop: int, headers: Callable[[int], Headers]) -> PayloadBatch:
    """Offsets ``first`` to ``stop`` of :data:`LANE`: each value is its offset, each
    timestamp 1.7e12 ms plus it, and ``headers(offset)`` the record's headers."""
    offsets = list(range(first, stop))
    return PayloadBatch(
        LANE,
        offsets,
        [memoryview(b"%d" % o) for o in offsets],
        [None] * len(offsets),
        [1_700_000_000_000 + o for o in offsets],
        stop,
        headers=[headers(o) for o in offsets],
    )


def _headers(offset: int) -> Headers:
    return Headers([("tenant", b"x"), ("tenant", b"t%d" % offset)])


def feed(
    processor: Any, sink: Any, batch: Callable[[], PayloadBatch], first: int, stop: int
) -> None:
    """Process ``batch()`` (offsets ``first`` to ``stop``), resuming while the sink stalls
    (60 s at most), then flush and close ``sink``."""
    ack = AckToken(LANE, 0, first, stop, stop - first, lambda t: None)
    resume = None
    deadline = time.monotonic() + 60
    while (stalled := processor.process(batch(), ack, resume)) is not None:
        assert time.monotonic() < deadline, "the sink refused rows for 60s"
        resume = stalled.cursor
        time.sleep(0.01)
    ack.release()
    sink.tick()
    assert sink.flush(time.monotonic() + 60)
    sink.close()


def _run(front: ChFront, table: str, first: int, stop: int, **extra: Any) -> None:
    sink, position = eo_sink(front, table, columns=COLUMNS, **extra)
    sink.start()
    processor = compile_chain(
        lambda ctx: ctx.chain().map(lambda v: (v, v)).sink(),
        deserializer=IntDeser(),
        sinks={"events": sink},
        meter=Meter("eo-meta"),
        pipeline="eo",
        position=position,
    )
    feed(processor, sink, lambda: offsets_batch(first, stop, _headers), first, stop)


def test_b255_a_replay_rebuilds_the_same_metadata_columns_and_writes_each_record_once(
    chfront: Any,
) -> None:
    front: ChFront = chfront()
    client = front.client()
    client.command(
        "CREATE TABLE meta_replayed (id UInt64, offset Int64, kafka_offset Int64, "
        "tenant Nullable(String), ts DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY id "
        "SETTINGS non_replicated_deduplication_window = 1000"
    )
    _run(front, "meta_replayed", 0, 10)
    # A later run replays from offset 2 (a commit that never happened), other batch sizes.
    _run(front, "meta_replayed", 2, 14, batch={"max_rows": 1000, "linger": "1h"})
    rows = client.query(
        "SELECT id, offset, kafka_offset, tenant, ts FROM meta_replayed ORDER BY id"
    ).result_rows
    assert [r[0] for r in rows] == list(range(14))
    for id_, offset, kafka_offset, tenant, ts in rows:
        assert offset == kafka_offset == id_
        assert tenant == f"t{id_}"
        expected = dt.datetime.fromtimestamp((1_700_000_000_000 + id_) / 1000, dt.UTC)
        assert (ts if ts.tzinfo is not None else ts.replace(tzinfo=dt.UTC)) == expected
