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


def offer(sink: Any, position: RecordPosition, offsets: range, lane: Lane = LANE) -> None:
    ack = AckToken(lane, 0, offsets.start, offsets.stop, len(offsets), lambda t: None)
    for offset in offsets:
        position.offset = offset
        deadline = time.monotonic() + 60
        while sink.offer((offset, offset), None, lane, ack) is Offer.REJECTED:
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
        "FINAL WHERE topic = 'orders' AND first_offset >= 0 ORDER BY first_offset"
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
    first = client.command(
        "SELECT min(first_offset) FROM spate_block_intents FINAL "
        "WHERE topic = 'orders' AND first_offset >= 0"
    )
    assert int(first) == 0  # [0-3] ends at 3 >= 2: still needed


def held_requests(front: ChFront, count: int) -> None:
    """Wait until the front holds ``count`` faulted requests (the slow intent insert)."""
    deadline = time.monotonic() + 60
    while int(front.status()["faulted_requests"]) < count:
        assert time.monotonic() < deadline, "the slow request never reached the front"
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["revoked", "frozen", "restarted"])
def test_b125_an_intent_landing_after_the_next_owner_read_the_intents_is_never_inserted(
    front: ChFront, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B125: the old owner's intent insert is held by the front across the hand-over of
    its partition; the next owner reads no intent and cuts the rows its own way; then the
    held intent lands. The old owner — told of the revocation after its drain gave up
    (``revoked``), never told, as a frozen member whose session expired (``frozen``), or
    closed by an in-process restart whose join gave up on the stuck worker
    (``restarted``, B126) — must not insert its block, and a third owner replaying the
    same offsets must not either."""
    monkeypatch.setattr("spate.sink._pool._JOIN_TIMEOUT", 0.2)
    table = f"handover_{how}"
    lane = Lane("handover", ["revoked", "frozen", "restarted"].index(how))
    client = front.client()
    create(client, table)
    before = int(front.status()["faulted_requests"])
    old, old_position = eo_sink(front, table)
    old.start()
    offer(old, old_position, range(0, 1), lane)  # the lane is claimed and read
    front.inject("slow", only="insert", count=1, delay=300)
    offer(old, old_position, range(1, 4), lane)  # a full block: its intent is held
    held_requests(front, before + 1)
    worker = old._engine._threads[0]
    if how == "revoked":
        assert not old.flush_lanes([lane], time.monotonic() + 0.2)  # the drain gives up
        old.lanes_revoked([lane])
    elif how == "restarted":
        old.close()  # the worker is still stuck in its request
        assert worker.is_alive()
    new, new_position = eo_sink(front, table, batch={"max_rows": 3, "linger": "1h"})
    new.start()
    offer(new, new_position, range(0, 6), lane)  # cut [0-2], [3-5]: other tokens
    assert new.flush(time.monotonic() + 60)
    front.release()  # the held intent lands now
    if how == "restarted":
        worker.join(60)
        assert not worker.is_alive()
    else:
        assert old.flush(time.monotonic() + 60)  # the old owner's write has finished
        old.close()
    new.close()
    ids = [r[0] for r in client.query(f"SELECT id FROM {table} ORDER BY id").result_rows]
    assert ids == list(range(6))
    # A third owner replays from offset 0 (nothing was committed) past the old owner's
    # late intent: it rebuilds the next owner's blocks, not the late one.
    third, third_position = eo_sink(front, table, batch={"max_rows": 100, "linger": "1h"})
    third.start()
    offer(third, third_position, range(0, 8), lane)
    third.tick()
    assert third.flush(time.monotonic() + 60)
    third.close()
    ids = [r[0] for r in client.query(f"SELECT id FROM {table} ORDER BY id").result_rows]
    assert ids == list(range(8))


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
