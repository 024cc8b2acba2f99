"""Inserts that follow the table's health, against the HTTP front over chDB (B224-B227).

The tables refuse inserts at 12 active parts (``parts_to_throw_insert = 12``, a real
MergeTree setting) and their merges are stopped (``SYSTEM STOP MERGES``), as when merges
fall behind. A sink with fixed small blocks walks into ``TOO_MANY_PARTS`` (code 252) and
fails its batches after its retries; the same sink following the table's parts grows its
blocks, holds its inserts at the limit until merges resume, and writes every row once
with no 252 at all; its block size returns to the configured one once the table is
healthy. Nothing waits on time: the test waits on the sink's own gauges.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.clickhouse.sinkkit import Driver, GaugeWatcher, build_sink, ids_on
from tests.support.chfront_fixtures import ChFront
from tests.support.scale import scaled

pytestmark = [pytest.mark.integration]

ROWS_PER_ACK = 50
THROW_AT = 12


@pytest.fixture(scope="module")
def front(chfront_module: Callable[..., ChFront]) -> Iterator[ChFront]:
    yield chfront_module()


def _table(front: ChFront, name: str) -> Any:
    client = front.client()
    client.command(
        f"CREATE TABLE {name} (id UInt64) ENGINE = MergeTree ORDER BY id "
        f"SETTINGS parts_to_throw_insert = {THROW_AT}, parts_to_delay_insert = 6, "
        "max_delay_to_insert = 1"
    )
    client.command(f"SYSTEM STOP MERGES {name}")
    return client


def _body(front: ChFront, table: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "table": table,
        "columns": ["id"],
        "shards": [{"replicas": [front.url]}],
        "batch": {"max_rows": ROWS_PER_ACK, "linger": "1h"},
        "retry": {"initial": "20ms", "max": "100ms", "max_attempts": 3},
        # A refused insert is the table's trouble, not the replica's: keep it in use.
        "breaker": {"failure_threshold": 1_000_000},
    }
    body.update(extra)
    return body


def _wait(
    condition: Callable[[], bool],
    what: str,
    state: Callable[[], object] = lambda: "",
    timeout: float = 120.0,
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {state()}")
        time.sleep(0.02)


def test_b226_a_fixed_batch_sink_walks_into_too_many_parts(front: ChFront) -> None:
    client = _table(front, "hp_fixed")
    count = scaled(2_000, minimum=1_000)
    built = build_sink(_body(front, "hp_fixed"))
    built.sink.start()
    driver = Driver(built.sink, batch_rows=ROWS_PER_ACK)
    driver.offer_all([(i,) for i in range(count)])
    driver.finish()
    built.sink.close()
    assert built.metric("spate_sink_errors_total", shard="0", error_class="retryable") > 0
    assert built.metric("spate_sink_abandoned_rows_total", shard="0") > 0
    assert not driver.all_delivered  # its batches failed: nothing may be committed past
    assert len(ids_on([client], "hp_fixed")) < count


def test_b224_b225_an_adaptive_sink_keeps_going_with_nothing_lost(front: ChFront) -> None:
    client = _table(front, "hp_adaptive")
    count = scaled(5_000, minimum=2_000)
    health = {"follow_parts": True, "check_interval": "100ms", "max_scale": 8, "max_hold": "5m"}
    built = build_sink(_body(front, "hp_adaptive", health=health))
    labels = {"table": "hp_adaptive"}
    watcher = GaugeWatcher(built, "spate_sink_batch_max_rows", **labels)
    built.sink.start()
    driver = Driver(built.sink, batch_rows=ROWS_PER_ACK)
    failure: list[BaseException] = []

    def offer() -> None:
        try:
            driver.offer_all([(i,) for i in range(count)], timeout=600)
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)

    feeder = threading.Thread(target=offer, daemon=True)
    feeder.start()
    # The table reaches its limit with merges stopped: the sink holds its inserts there.
    _wait(
        lambda: (
            built.metric("spate_sink_insert_wait_seconds_total", cause="pressure", **labels) > 0
        ),
        "the sink to hold an insert at the table's limit",
        lambda: (
            {
                n: built.metric(f"spate_sink_{n}", **labels)
                for n in ("table_active_parts", "table_pressure", "batch_max_rows")
            }
            | {
                "written": built.metric("spate_sink_records_total", shard="0"),
                "rejections": driver.rejections,
                "failure": failure,
            }
        ),
    )
    assert built.metric("spate_sink_table_pressure", **labels) == 1.0
    parts = built.metric("spate_sink_table_active_parts", **labels)
    assert THROW_AT - 2 <= parts < THROW_AT
    # Merges resume: the parts fall, the held inserts go, the blocks return.
    client.command("SYSTEM START MERGES hp_adaptive")
    client.command("OPTIMIZE TABLE hp_adaptive FINAL")
    feeder.join(600)
    assert not failure, failure
    assert driver.finish()
    client.command("OPTIMIZE TABLE hp_adaptive FINAL")
    # One more block once the table is healthy reads the parts and returns the sizes.
    more = Driver(built.sink, batch_rows=ROWS_PER_ACK)
    more.offer_all([(count + i,) for i in range(ROWS_PER_ACK)])
    assert more.finish()
    assert built.metric("spate_sink_table_pressure", **labels) == 0
    peak = watcher.stop()
    built.sink.close()
    assert driver.all_delivered and more.all_delivered
    assert sorted(ids_on([client], "hp_adaptive")) == list(range(count + ROWS_PER_ACK))
    assert built.metric("spate_sink_errors_total", shard="0", error_class="retryable") == 0
    assert peak > ROWS_PER_ACK  # blocks grew under pressure
    assert built.metric("spate_sink_batch_max_rows", **labels) == ROWS_PER_ACK
    flushes = built.metric("spate_sink_flushes_total", shard="0", reason="max_rows")
    assert flushes < (count + ROWS_PER_ACK) / ROWS_PER_ACK  # fewer, larger inserts


def test_b227_a_group_rate_spaces_the_inserts_of_a_real_sink(front: ChFront) -> None:
    """One insert per second shared by a group of two: this member's inserts are 2 s
    apart, so the later ones wait for their slot (counted; an insert would have to take
    longer than 2 s for none to), and every row is written once."""
    client = front.client()
    client.command("CREATE TABLE hp_rate (id UInt64) ENGINE = MergeTree ORDER BY id")
    health = {"max_inserts_per_second": 1, "members": 2}
    built = build_sink(_body(front, "hp_rate", health=health))
    built.sink.start()
    driver = Driver(built.sink, batch_rows=ROWS_PER_ACK)
    driver.offer_all([(i,) for i in range(4 * ROWS_PER_ACK)])
    assert driver.finish()
    built.sink.close()
    assert driver.all_delivered
    assert sorted(ids_on([client], "hp_rate")) == list(range(4 * ROWS_PER_ACK))
    assert built.metric("spate_sink_insert_wait_seconds_total", cause="rate", table="hp_rate") > 0
    # A rate alone reads no parts: the parts gauges stay unset.
    assert built.metric("spate_sink_table_active_parts", table="hp_rate") == 0
