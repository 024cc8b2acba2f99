"""Inserts that follow the table's health, on a manual clock and a scripted server
(B224-B227): pressure from the parts and the table's thresholds, blocks that grow and
come back, an insert held at the limit, TOO_MANY_PARTS, and the group's insert rate.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from spate import ManualClock
from spate.metrics import Meter
from spate.sink import BatchConfig
from spate_clickhouse._health import TableHealth, Thresholds
from spate_clickhouse.config import TableHealthConfig


class Result:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.result_rows = rows


class Server:
    """Answers the three system-table queries; ``parts`` is what system.parts says next."""

    def __init__(self, parts: Iterator[int], engine: str, defaults: tuple[int, int]) -> None:
        self.parts = parts
        self.engine = engine
        self.defaults = defaults
        self.reads = 0

    def query(self, sql: str) -> Result:
        if "merge_tree_settings" in sql:
            delay, throw = self.defaults
            return Result([("parts_to_delay_insert", delay), ("parts_to_throw_insert", throw)])
        if "system.tables" in sql:
            return Result([(self.engine,)])
        self.reads += 1
        return Result([(next(self.parts),)])


class Resizes:
    def __init__(self) -> None:
        self.calls: list[dict[str, float]] = []

    def __call__(self, **limits: float) -> None:
        self.calls.append(limits)


def health(
    clock: ManualClock, meter: Meter | None = None, processes: int = 1, **config: Any
) -> tuple[TableHealth, Resizes]:
    table = TableHealth(
        TableHealthConfig(**config),
        database="db",
        table="events",
        batch=BatchConfig(max_rows=100, max_bytes=10_000, linger=1.0),
        clock=clock,
        members=processes,
    )
    resizes = Resizes()
    table.bind(resizes, meter or Meter("h", CollectorRegistry()), "events", "sink")
    return table, resizes


def test_b224_thresholds_come_from_the_table_settings_before_the_server_defaults() -> None:
    clock = ManualClock()
    table, _ = health(clock, follow_parts=True)
    server = Server(
        iter([0]),
        "MergeTree ORDER BY id SETTINGS parts_to_throw_insert = 20, index_granularity = 8192",
        (1000, 3000),
    )
    table.before_insert(server)  # type: ignore[arg-type]
    thresholds = table._thresholds
    assert thresholds is not None
    assert (thresholds.delay, thresholds.throw) == (20, 20)  # delay capped by throw
    assert Thresholds(6, 20).hold_at == 18 and Thresholds(1000, 3000).hold_at == 2700


def test_b224_blocks_grow_under_pressure_and_return_when_healthy() -> None:
    clock = ManualClock()
    meter = Meter("grow", CollectorRegistry())
    table, resizes = health(clock, meter, follow_parts=True, max_scale=4.0, check_interval=5.0)
    # delay 8, throw 20: pressure from 4 parts, full at 18.
    server = Server(iter([2, 11, 18, 18, 3, 3]), "MergeTree", (8, 20))
    table.before_insert(server)  # type: ignore[arg-type]
    assert table.pressure == 0 and resizes.calls == []
    clock.advance(5)
    table.before_insert(server)  # type: ignore[arg-type]  # 11 parts: half-way
    assert 0.4 < table.pressure < 0.6
    assert resizes.calls[-1]["max_rows"] > 100
    grown = resizes.calls[-1]["max_rows"]
    labels = {"pipeline": "grow", "component": "events", "component_type": "sink"}
    labels["table"] = "db.events"
    assert meter.registry.get_sample_value("spate_sink_batch_max_rows", labels) == grown
    assert meter.registry.get_sample_value("spate_sink_table_active_parts", labels) == 11
    # 18 parts: at the limit, the insert is held until the parts fall (3).
    table.before_insert(server)  # type: ignore[arg-type]
    assert resizes.calls[-1] == {"max_rows": 100, "max_bytes": 10_000, "linger": 1.0}
    assert table.pressure == 0
    assert 400 in [c["max_rows"] for c in resizes.calls]  # full pressure: 4 times
    waited = meter.registry.get_sample_value(
        "spate_sink_insert_wait_seconds_total", {**labels, "cause": "pressure"}
    )
    assert waited == 10.0  # two re-reads, check_interval apart


def test_b225_an_insert_is_held_at_most_max_hold() -> None:
    clock = ManualClock()
    table, _ = health(clock, follow_parts=True, check_interval=2.0, max_hold=7.0)
    server = Server(iter([19] * 100), "MergeTree", (8, 20))
    start = clock.monotonic()
    table.before_insert(server)  # type: ignore[arg-type]
    # held 7 s at the limit, then sent (the server may refuse it: a retry follows)
    assert clock.monotonic() - start == 7.0


def test_b226_too_many_parts_is_full_pressure_until_the_parts_say_otherwise() -> None:
    clock = ManualClock()
    table, resizes = health(clock, follow_parts=True, check_interval=5.0, max_scale=8.0)
    table.too_many_parts()
    assert table.pressure == 1.0 and resizes.calls[-1]["max_rows"] == 800
    server = Server(iter([2, 2, 2]), "MergeTree", (8, 20))
    table.before_insert(server)  # type: ignore[arg-type]  # held until the 252 ages out
    assert table.pressure == 0.0
    assert resizes.calls[-1]["max_rows"] == 100


def test_b227_each_member_takes_its_share_of_the_groups_insert_rate() -> None:
    clock = ManualClock()
    # 2 inserts per second for a group of 4: this member inserts every 2 s.
    table, _ = health(clock, processes=4, max_inserts_per_second=2.0)
    server = Server(iter(()), "MergeTree", (8, 20))
    times = []
    for _ in range(4):
        table.before_insert(server)  # type: ignore[arg-type]
        times.append(clock.monotonic())
    assert [b - a for a, b in itertools.pairwise(times)] == [2.0, 2.0, 2.0]
    assert server.reads == 0  # a rate alone reads no parts
    explicit, _ = health(ManualClock(), processes=4, max_inserts_per_second=2.0, members=1)
    assert explicit._members == 1
