"""Distributed placement: ClickHouse's hashes bit for bit, weights, determinism (B13).

The expected hashes below were computed by ClickHouse itself (chDB 26.9); the
integration test ``tests/clickhouse`` compares 10k keys against a running engine.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from spate._clock import ManualClock
from spate.checkpoint._ack import AckToken
from spate.config._decode import decode
from spate.errors import ErrorClass, SinkError
from spate.flow._budget import InflightBudget
from spate.metrics._meter import Meter
from spate.records import Lane
from spate.sink import ListRowBuffer, Offer, ShardConfig, SinkPool
from spate.testing import ScriptedEndpoints
from spate.testing.conformance import conformance_context
from spate_clickhouse import (
    ClickHouseSinkConfig,
    ClickHouseSinkFactory,
    Column,
    DistributedPlacement,
    parse_type,
)
from spate_clickhouse._router import DistributedRouter, _key_bytes, int_hash64
from spate_clickhouse._xxhash import xxhash64

STRING = parse_type("String")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xEF46DB3751D8E999),
        (b"abc", 4952883123889572249),
        (b"Nobody inspects the spammish repetition", 18144624926692707313),
        (b"x" * 100, 10588207204368892052),
    ],
)
def test_xxhash64_matches_clickhouse(data: bytes, expected: int) -> None:
    assert xxhash64(data) == expected


@pytest.mark.parametrize(
    ("type_name", "value", "expected"),
    [
        ("UInt64", 5, 9925382920258869565),  # xxHash64(toUInt64(5))
        ("Int32", -1, 9185342943168159635),  # xxHash64(toInt32(-1))
        ("Int16", -2, 11395808650172739286),
        ("Date", 18262, 11120563652420268876),  # 2020-01-01
        ("DateTime", 1577836800, 5825004945018294187),
        ("Float64", 1.5, 5329932555030153977),
        ("String", "abc", 4952883123889572249),
    ],
)
def test_values_are_hashed_at_their_column_width(
    type_name: str, value: object, expected: int
) -> None:
    assert xxhash64(_key_bytes(parse_type(type_name))(value)) == expected


def test_temporal_keys_hash_as_clickhouse_lays_them_out() -> None:
    utc = dt.UTC
    for type_name, value, expected in (
        ("Date", dt.date(2020, 1, 1), 11120563652420268876),
        ("DateTime", dt.datetime(2020, 1, 1, tzinfo=utc), 5825004945018294187),
    ):
        placement = DistributedPlacement("xxHash64", Column("k", parse_type(type_name)), [1])
        assert placement.hash_of(value) == expected
    # a naive datetime is UTC, as everywhere in the sink
    naive = DistributedPlacement("xxHash64", Column("k", parse_type("DateTime")), [1])
    assert naive.hash_of(dt.datetime(2020, 1, 1)) == 5825004945018294187


def test_int_hash64_matches_clickhouse() -> None:
    assert int_hash64(0) == 4761183170873013810
    assert int_hash64(12345) == 16722121143744093920
    assert int_hash64(-1) == 14600443904207254319


def test_placement_follows_the_weight_intervals() -> None:
    column = Column("k", parse_type("UInt64"))
    placement = DistributedPlacement("", column, [1, 2])
    # remainder 0 → shard 0; 1 and 2 → shard 1
    assert [placement.shard_of(v) for v in range(6)] == [0, 1, 1, 0, 1, 1]
    signed = DistributedPlacement("", Column("k", parse_type("Int8")), [1, 1, 1])
    assert signed.shard_of(-1) == 255 % 3  # the unsigned bits, as ClickHouse takes them
    hashed = DistributedPlacement("xxHash64", Column("k", parse_type("String")), [3, 1])
    assert hashed.shard_of("abc") == [0, 0, 0, 1][4952883123889572249 % 4]


def test_unsupported_sharding_columns_are_refused() -> None:
    with pytest.raises(ValueError, match="integer"):
        DistributedPlacement("", Column("k", parse_type("String")), [1, 1])
    with pytest.raises(ValueError, match="Nullable"):
        DistributedPlacement("xxHash64", Column("k", parse_type("Nullable(String)")), [1])
    with pytest.raises(ValueError, match="not supported"):
        DistributedPlacement("xxHash64", Column("k", parse_type("Array(Int8)")), [1])


_CHILD = """
import json, sys
from spate_clickhouse import Column, DistributedPlacement, parse_type
from spate.sink import WeightedHashRouter
from spate.records import Lane
keys = [f"customer-{i}" for i in range(2000)]
p = DistributedPlacement("xxHash64", Column("k", parse_type("String")), [2, 1, 3])
r = WeightedHashRouter([2, 1, 3])
json.dump({"ch": [p.shard_of(k) for k in keys],
           "key": [r.route(None, k.encode(), Lane("t", 0)) for k in keys]}, sys.stdout)
"""


def test_b13_placement_is_identical_in_separately_seeded_processes() -> None:
    results = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD], env=env, capture_output=True, check=True, timeout=120
        )
        results.append(json.loads(out.stdout))
    assert results[0] == results[1]
    assert set(results[0]["ch"]) == {0, 1, 2}


def _distributed_sink() -> tuple[Any, ScriptedEndpoints]:
    clock = ManualClock()
    endpoints = ScriptedEndpoints(clock)
    column = Column("k", parse_type("UInt8"))
    router = DistributedRouter("", "k", 0, [1, 2], lambda: [column])
    sink = SinkPool(
        "events",
        endpoints,
        shards=[ShardConfig(replicas=("a",), weight=1), ShardConfig(replicas=("b",), weight=2)],
        pipeline="test",
        run_nonce="run1",
        meter=Meter("test-distributed"),
        clock=clock,
        budget=InflightBudget(1 << 30),
        io_threads=0,
        router=router,
    )
    return sink, endpoints


def _ack() -> AckToken:
    return AckToken(Lane("t", 0), 0, 1, 1, 1, lambda token: None)


def test_b13_distributed_sink_places_rows_by_their_column_value() -> None:
    sink, endpoints = _distributed_sink()
    sink.start()
    ack = _ack()
    for k in range(9):
        assert sink.offer((k, f"row{k}"), None, Lane("t", 0), ack) is Offer.ACCEPTED
    sink.offer({"k": 9, "v": "dict row"}, None, Lane("t", 0), ack)
    assert sink.flush(deadline=1e9)

    def keys(endpoint: str) -> list[int]:
        rows = [row for attempt in endpoints.attempts_on(endpoint) for row in attempt.rows]
        return sorted(r["k"] if isinstance(r, dict) else r[0] for r in rows)  # type: ignore[index]

    # weights [1, 2]: value % 3 == 0 is shard 0's interval, 1 and 2 are shard 1's
    assert keys("a") == [0, 3, 6, 9]
    assert keys("b") == [1, 2, 4, 5, 7, 8]
    sink.close()


def test_b13_the_pool_hands_its_router_the_row_and_a_column_places_like_its_rows() -> None:
    """``router: distributed`` is the pool's own router (no wrapper sink in front): the
    factory builds a plain SinkPool, and routing a whole column of sharding values gives
    the shards of the rows holding them."""
    config = decode(
        ClickHouseSinkConfig,
        {
            "table": "t",
            "columns": ["k", "v"],
            "shards": [{"replicas": ["http://127.0.0.1:1"]}, {"replicas": ["http://127.0.0.1:2"]}],
            "router": "distributed",
            "sharding_key": "xxHash64(k)",
        },
        "sink.clickhouse",
    )
    built = ClickHouseSinkFactory.build(config, conformance_context("ch"))
    assert type(built) is SinkPool
    assert isinstance(built.router, DistributedRouter)
    sink, _ = _distributed_sink()
    sink.start()
    router = DistributedRouter("xxHash64", "k", 0, [2, 1, 3], lambda: [Column("k", STRING)])
    router.start()
    assert router.placed_by == "k"
    lane = Lane("t", 0)
    values = [f"customer-{i}" for i in range(500)]
    rows = [router.route((v, "x"), None, lane) for v in values]
    assert router.route_column(values, lane) == rows
    assert rows == [router.placement.shard_of(v) for v in values]
    assert set(rows) == {0, 1, 2}
    sink.close()


def test_a_row_without_a_usable_key_is_a_record_error() -> None:
    sink, _ = _distributed_sink()
    sink.start()
    with pytest.raises(SinkError) as info:
        sink.offer((300, "x"), None, Lane("t", 0), _ack())
    assert info.value.error_class is ErrorClass.RECORD
    assert "out of range" in info.value.reason
    with pytest.raises(SinkError, match="cannot place the row by k"):
        sink.offer(("x",), None, Lane("t", 0), _ack())
    with pytest.raises(SinkError, match="cannot place"):
        sink.offer(object(), None, Lane("t", 0), _ack())
    sink.close()


def test_b13_the_compiled_xxhash_places_exactly_as_the_pure_python_one() -> None:
    """B13: with ``spate[columnar]`` the router hashes with the compiled xxHash64; it
    must equal the pure-Python one (and so ClickHouse) on every key layout."""
    xxhash = pytest.importorskip("xxhash")
    from spate_clickhouse import _router

    assert _router._xxh64 is xxhash.xxh64_intdigest
    for type_name, values in [
        ("String", ["", "abc", "customer-42", "é" * 40]),
        ("Int32", [-1, 0, 7, 2**31 - 1]),
        ("UInt64", [0, 5, 2**64 - 1]),
        ("Date", [dt.date(2020, 1, 1), dt.date(1970, 1, 2)]),
    ]:
        layout = _key_bytes(parse_type(type_name))
        for value in values:
            assert xxhash.xxh64_intdigest(layout(value)) == xxhash64(layout(value))


class FrameBuffer(ListRowBuffer):
    """Keeps an appended Arrow table's rows, as dicts, for the scripted endpoints."""

    __slots__ = ()

    def append_frame(self, table: Any) -> int:
        self.rows.extend(table.to_pylist())
        return int(table.nbytes)


def test_b13_a_frame_is_placed_by_the_distributed_router_as_its_rows_would_be() -> None:
    """B13: a prepared frame offered to a ``router: distributed`` pool is split through
    ``route_column`` over its sharding column: each row on the shard ``route`` picks."""
    pa = pytest.importorskip("pyarrow")

    class FrameEndpoints(ScriptedEndpoints):
        takes_frames = True

        def new_buffer(self, shard: int) -> Any:
            return FrameBuffer()

        def prepare_frame(self, frame: Any) -> tuple[Any, list[tuple[int, str]]]:
            return frame, []

        def take_rows(self, table: Any, rows: list[int]) -> Any:
            return table.take(pa.array(rows))

    clock = ManualClock()
    endpoints = FrameEndpoints(clock)
    column = Column("k", parse_type("UInt8"))
    sink = SinkPool(
        "events",
        endpoints,
        shards=[ShardConfig(replicas=("a",), weight=1), ShardConfig(replicas=("b",), weight=2)],
        pipeline="test",
        run_nonce="run1",
        meter=Meter("test-distributed-frame"),
        clock=clock,
        budget=InflightBudget(1 << 30),
        io_threads=0,
        router=DistributedRouter("", "k", 0, [1, 2], lambda: [column]),
    )
    sink.start()
    assert not sink.frame_needs_keys
    table = pa.table({"k": pa.array(range(10), pa.uint8()), "v": [f"r{i}" for i in range(10)]})
    assert sink.offer_frame(table, None, Lane("t", 0), _ack()) is Offer.ACCEPTED
    assert sink.flush(deadline=1e9)

    def keys(endpoint: str) -> list[int]:
        return sorted(r["k"] for a in endpoints.attempts_on(endpoint) for r in a.rows)  # type: ignore[index]

    assert keys("a") == [0, 3, 6, 9]
    assert keys("b") == [1, 2, 4, 5, 7, 8]
    bad = pa.table({"k": pa.array([1, 300], pa.int64()), "v": ["x", "y"]})
    with pytest.raises(SinkError, match="sink events: cannot place") as info:
        sink.offer_frame(bad, None, Lane("t", 0), _ack())
    assert info.value.error_class is ErrorClass.RECORD
    sink.close()
