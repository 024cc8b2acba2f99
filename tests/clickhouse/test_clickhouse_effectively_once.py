"""The ClickHouse sink under ``delivery: effectively_once`` against the HTTP front (B88
to B91): the intents in the state table, a replay in a later run that writes nothing
twice, and the start-up checks that refuse what cannot give the guarantee."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from spate import AckToken, ConfigError, Lane, SinkError
from spate._clock import SystemClock
from spate.config import decode
from spate.flow._budget import InflightBudget
from spate.metrics._meter import Meter
from spate.plugins import BuildContext
from spate.sink import Offer, RecordPosition
from spate_clickhouse import ClickHouseSinkConfig, ClickHouseSinkFactory

from tests.support.chfront_fixtures import ChFront


@pytest.fixture(scope="module")
def front(chfront_module: Callable[..., ChFront]) -> ChFront:
    """One front for the module: every test uses its own tables."""
    return chfront_module()


pytestmark = [pytest.mark.integration]

LANE = Lane("orders", 3)


def eo_sink(front: ChFront, table: str, **extra: Any) -> tuple[Any, RecordPosition]:
    body = {
        "table": table,
        "columns": ["id", "offset"],
        "shards": [{"replicas": [front.url]}],
        "batch": {"max_rows": 4, "linger": "1h"},
        **extra,
    }
    config = decode(ClickHouseSinkConfig, body, "sinks.events.clickhouse")
    position = RecordPosition()
    context = BuildContext(
        pipeline="eo",
        component="events",
        meter=Meter("eo"),
        clock=SystemClock(),
        run_nonce=f"nonce{time.monotonic_ns()}",
        budget=InflightBudget(1 << 30),
        io_threads=1,
        delivery="effectively_once",
        position=position,
    )
    return ClickHouseSinkFactory.build(config, context), position


def offer(sink: Any, position: RecordPosition, offsets: range) -> None:
    ack = AckToken(LANE, 0, offsets.start, offsets.stop, len(offsets), lambda t: None)
    for offset in offsets:
        position.offset = offset
        deadline = time.monotonic() + 60
        while sink.offer((offset, offset), None, LANE, ack) is Offer.REJECTED:
            assert time.monotonic() < deadline, "the sink refused rows for 60s"
            time.sleep(0.01)
    ack.release()


def create(client: Any, table: str, window: int = 1000, engine: str = "MergeTree") -> None:
    settings = f" SETTINGS non_replicated_deduplication_window = {window}" if window else ""
    order = " ORDER BY id" if "MergeTree" in engine else ""
    client.command(
        f"CREATE TABLE {table} (id UInt64, offset Int64) ENGINE = {engine}{order}{settings}"
    )


def test_b89_a_later_run_replaying_from_an_older_offset_writes_no_row_twice(
    front: ChFront,
) -> None:
    client = front.client()
    create(client, "replayed")
    sink, position = eo_sink(front, "replayed")
    sink.start()
    offer(sink, position, range(0, 10))  # blocks [0-3], [4-7] by size, [8-9] by the tick
    sink.tick()
    assert sink.flush(time.monotonic() + 60)
    sink.close()
    intents = client.query(
        "SELECT shard, topic, partition, first_offset, last_offset FROM spate_block_intents "
        "FINAL ORDER BY first_offset"
    ).result_rows
    assert [tuple(r) for r in intents] == [
        (0, "orders", 3, 0, 3),
        (0, "orders", 3, 4, 7),
        (0, "orders", 3, 8, 9),
    ]
    # A later run (another run nonce, other batch settings) replays from offset 2 — a
    # commit that never happened — with a tick after every record.
    again, position2 = eo_sink(front, "replayed", batch={"max_rows": 1000, "linger": "1h"})
    again.start()
    for offset in range(2, 14):
        offer(again, position2, range(offset, offset + 1))
        again.tick()
    assert again.flush(time.monotonic() + 60)
    again.close()
    ids = [r[0] for r in client.query("SELECT id FROM replayed ORDER BY id").result_rows]
    assert ids == list(range(14))
    # The intents ending before the replay's first offset were deleted at its start.
    first = client.command("SELECT min(first_offset) FROM spate_block_intents FINAL")
    assert int(first) == 0  # [0-3] ends at 3 >= 2: still needed


def test_b90_a_table_without_a_deduplication_window_is_refused_with_the_fix(
    front: ChFront,
) -> None:
    create(front.client(), "no_window", window=0)
    sink, _ = eo_sink(front, "no_window")
    with pytest.raises(SinkError) as raised:
        sink.start()
    message = str(raised.value)
    assert "non_replicated_deduplication_window >= 1000" in message
    assert (
        "ALTER TABLE `no_window` MODIFY SETTING non_replicated_deduplication_window = 1000"
        in message
    )
    assert "\n" not in message


def test_b90_a_table_outside_the_merge_tree_family_is_refused(
    front: ChFront,
) -> None:
    create(front.client(), "a_log", window=0, engine="Log")
    sink, _ = eo_sink(front, "a_log")
    with pytest.raises(SinkError, match="needs a MergeTree-family table; `a_log` is Log"):
        sink.start()


def test_b90_async_insert_is_refused_at_build(front: ChFront) -> None:
    with pytest.raises(ConfigError, match="async_insert"):
        eo_sink(front, "t", settings={"async_insert": 1})
