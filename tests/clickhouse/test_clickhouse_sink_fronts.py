"""The ClickHouse sink against the HTTP fronts over chDB: placement, types, schema checks.

Four fronts per module (two shards of two replicas). Each test makes its own tables.
Volumes scale with ``SPATE_TEST_SCALE`` (1M rows at scale 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from spate import Pipeline
from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.testing import memory_source

from tests.clickhouse.sinkkit import Driver, build_sink, ids_on
from tests.support.chfront import alltypes
from tests.support.chfront_fixtures import ChFront
from tests.support.scale import scaled

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fronts(chfront_module: Callable[..., ChFront]) -> Iterator[list[ChFront]]:
    """Four replicas: shard 0 is fronts 0 and 1, shard 1 is fronts 2 and 3."""
    yield [chfront_module() for _ in range(4)]


def _create(fronts: list[ChFront], ddl: str) -> list[Any]:
    clients = [f.client() for f in fronts]
    for client in clients:
        client.command(ddl)
    return clients


def _two_shards(fronts: list[ChFront]) -> list[dict[str, Any]]:
    return [
        {"replicas": [fronts[0].url, fronts[1].url]},
        {"replicas": [fronts[2].url, fronts[3].url]},
    ]


_ROUTE_CHILD = """
import json, sys
from spate.config import decode
from spate.records import Lane
from tests.clickhouse.sinkkit import build_sink
body = json.loads(sys.argv[1])
sink = build_sink(body).sink
count = int(sys.argv[2])
json.dump([sink.shard_of(f"key-{i}".encode(), Lane("test", 0)) for i in range(count)], sys.stdout)
"""


def test_b13_rows_land_on_their_own_shard_only_and_two_processes_place_them_alike(
    fronts: list[ChFront],
) -> None:
    count = scaled(1_000_000, minimum=20_000)
    clients = _create(
        fronts,
        "CREATE TABLE placed (id UInt64, key String, amount Float64, at DateTime64(3)) "
        "ENGINE = MergeTree ORDER BY id",
    )
    body = {
        "table": "placed",
        "columns": ["id", "key", "amount", "at"],
        "shards": _two_shards(fronts),
        "validate_schema": "full",
        "batch": {"max_rows": max(2_000, count // 20), "linger": "200ms"},
        "inflight": {"max_per_shard": 2},
    }
    built = build_sink(body)
    sink = built.sink
    keys = [f"key-{i}".encode() for i in range(count)]
    rows = [(i, keys[i].decode(), i * 0.25, 1_700_000_000_000 + i) for i in range(count)]
    expected_shard = [sink.shard_of(k, Lane("test", 0)) for k in keys]
    sink.start()
    driver = Driver(sink, batch_rows=5_000)
    driver.offer_all(rows, keys)
    assert driver.finish()
    assert driver.all_delivered
    sink.close()

    on_shard = [set(ids_on(clients[0:2], "placed")), set(ids_on(clients[2:4], "placed"))]
    want = [{i for i in range(count) if expected_shard[i] == s} for s in (0, 1)]
    assert on_shard[0] == want[0]  # every row present at least once on its own shard ...
    assert on_shard[1] == want[1]
    assert not on_shard[0] & on_shard[1]  # ... and never on the other one
    assert 0.4 < len(want[0]) / count < 0.6
    assert built.metric("spate_sink_records_total", shard="0") == len(want[0])

    # A second process (another hash seed) routes the same keys to the same shards.
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", _ROUTE_CHILD, json.dumps(body), str(count)],
        env=env,
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=300,
    )
    assert json.loads(out.stdout) == expected_shard


def test_distributed_router_places_10k_keys_where_clickhouse_hashes_them(
    fronts: list[ChFront],
) -> None:
    keys = 10_000
    shard0, shard1 = fronts[0], fronts[2]
    c0, c1 = _create(
        [shard0, shard1],
        "CREATE TABLE dist (k String, n Int64, x Float32) ENGINE = MergeTree ORDER BY k",
    )
    shards = [{"replicas": [shard0.url], "weight": 1}, {"replicas": [shard1.url], "weight": 2}]
    for key_expr, table in (("xxHash64(k)", "dist"),):
        built = build_sink(
            {
                "table": table,
                "columns": ["k", "n", "x"],
                "shards": shards,
                "router": "distributed",
                "sharding_key": key_expr,
                "batch": {"max_rows": 2_000},
            }
        )
        built.sink.start()
        driver = Driver(built.sink)
        driver.offer_all(
            [(f"user-{i}-{'é' * (i % 7)}", i * 7919 - 10**9, 0.5) for i in range(keys)]
        )
        assert driver.finish() and driver.all_delivered
        built.sink.close()
    # ClickHouse's own computation, on the rows each shard holds: remainder of the hash
    # by the total weight (3); shard 0 owns remainder 0, shard 1 owns 1 and 2.
    held0, misplaced0 = c0.query(
        "SELECT count(), countIf(xxHash64(k) % 3 >= 1) FROM dist"
    ).result_rows[0]
    held1, misplaced1 = c1.query(
        "SELECT count(), countIf(xxHash64(k) % 3 < 1) FROM dist"
    ).result_rows[0]
    assert held0 + held1 == keys
    assert (misplaced0, misplaced1) == (0, 0)
    assert 0.25 < held0 / keys < 0.42


def test_distributed_router_on_a_signed_integer_key_matches_clickhouse(
    fronts: list[ChFront],
) -> None:
    shard0, shard1 = fronts[1], fronts[3]
    c0, c1 = _create(
        [shard0, shard1], "CREATE TABLE dist_int (n Int64, s String) ENGINE = MergeTree ORDER BY n"
    )
    built = build_sink(
        {
            "table": "dist_int",
            "columns": ["n", "s"],
            "shards": [
                {"replicas": [shard0.url], "weight": 3},
                {"replicas": [shard1.url], "weight": 2},
            ],
            "router": "distributed",
            "sharding_key": "n",
        }
    )
    built.sink.start()
    driver = Driver(built.sink)
    values = [i * 104_729 - 5 * 10**8 for i in range(scaled(10_000, minimum=2_000))]
    driver.offer_all([(v, "") for v in values])
    assert driver.finish() and driver.all_delivered
    built.sink.close()
    # ClickHouse takes a signed key's unsigned bits: reinterpretAsUInt64(n) % 5 < 3 → shard 0
    bad0 = c0.query("SELECT countIf(reinterpretAsUInt64(n) % 5 >= 3) FROM dist_int").result_rows
    bad1 = c1.query("SELECT countIf(reinterpretAsUInt64(n) % 5 < 3) FROM dist_int").result_rows
    assert bad0[0][0] == 0 and bad1[0][0] == 0
    total = sum(c.query("SELECT count() FROM dist_int").result_rows[0][0] for c in (c0, c1))
    assert total == len(values)


@pytest.mark.parametrize("compression", ["lz4", "zstd", "none"])
def test_every_type_round_trips_through_the_sink_into_a_front(
    fronts: list[ChFront], compression: str
) -> None:
    count = scaled(20_000, minimum=3_000)
    table = f"alltypes_{compression}"
    client = fronts[0].client()
    client.command(alltypes.create_table_sql(table))
    built = build_sink(
        {
            "table": table,
            "columns": list(alltypes.NAMES),
            "shards": [{"replicas": [fronts[0].url]}],
            "validate_schema": "full",
            "compression": compression,
            "batch": {"max_rows": count // 3 + 1},
        }
    )
    built.sink.start()
    sent = alltypes.rows(count)
    driver = Driver(built.sink)
    driver.offer_all(sent)
    assert driver.finish() and driver.all_delivered
    built.sink.close()
    assert built.metric("spate_sink_flushes_total", shard="0", reason="max_rows") >= 2
    back = client.query(f"SELECT {', '.join(alltypes.NAMES)} FROM {table} ORDER BY id")
    got = [alltypes.normalise(r) for r in back.result_rows]
    assert len(got) == count
    assert got == [alltypes.normalise(r) for r in sent]


def test_every_type_round_trips_through_chdb_urls(tmp_path: Path) -> None:
    """The same rows through a ``chdb://`` replica, in its own process (one engine each)."""
    count = scaled(20_000, minimum=3_000)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.clickhouse.chdb_child",
            "alltypes",
            str(tmp_path / "ch"),
            str(count),
        ],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"rows": count, "equal": True, "delivered": True}


def test_b20_names_finds_a_column_missing_on_one_replica(fronts: list[ChFront]) -> None:
    fronts[0].client().command(
        "CREATE TABLE s_names (id UInt64, v String) ENGINE = MergeTree ORDER BY id"
    )
    fronts[1].client().command("CREATE TABLE s_names (id UInt64) ENGINE = MergeTree ORDER BY id")
    built = build_sink(
        {
            "table": "s_names",
            "columns": ["id", "v"],
            "shards": [{"replicas": [fronts[0].url, fronts[1].url]}],
            "validate_schema": "names",
        }
    )
    with pytest.raises(SinkError) as info:
        built.sink.start()
    assert info.value.error_class is ErrorClass.FATAL
    assert fronts[1].url in info.value.reason
    assert "column v not in s_names" in info.value.reason
    assert fronts[0].url not in info.value.reason.split("replica")[-1]
    built.sink.close()


def test_b20_full_finds_a_type_disagreement_between_replicas_and_with_config(
    fronts: list[ChFront],
) -> None:
    fronts[2].client().command(
        "CREATE TABLE s_types (id UInt64, v Decimal(18, 4)) ENGINE = MergeTree ORDER BY id"
    )
    fronts[3].client().command(
        "CREATE TABLE s_types (id UInt64, v Decimal(18, 2)) ENGINE = MergeTree ORDER BY id"
    )
    body: dict[str, Any] = {
        "table": "s_types",
        "columns": ["id", "v"],
        "shards": [{"replicas": [fronts[2].url, fronts[3].url]}],
        "validate_schema": "full",
    }
    built = build_sink(body)
    with pytest.raises(SinkError) as info:
        built.sink.start()
    reason = info.value.reason
    assert info.value.error_class is ErrorClass.FATAL
    assert "column v is Decimal(18, 2) on " + fronts[3].url in reason
    assert "Decimal(18, 4) on " + fronts[2].url in reason
    built.sink.close()
    # names alone does not compare types; a declared type that disagrees is caught by full
    names = build_sink({**body, "validate_schema": "names"})
    names.sink.start()
    names.sink.close()
    declared = build_sink(
        {
            **body,
            "columns": ["id", {"v": "Decimal(18, 2)"}],
            "shards": [{"replicas": [fronts[2].url]}],
        }
    )
    with pytest.raises(
        SinkError, match=r"column v is declared Decimal\(18, 2\) but is Decimal\(18, 4\)"
    ):
        declared.sink.start()
    declared.sink.close()


def test_b20_a_first_row_that_does_not_fit_fails_fatally(fronts: list[ChFront]) -> None:
    fronts[0].client().command(
        "CREATE TABLE s_first (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id"
    )
    built = build_sink(
        {
            "table": "s_first",
            "columns": ["id", "at"],
            "shards": [{"replicas": [fronts[0].url]}],
            "validate_schema": "full",
        }
    )
    built.sink.start()
    with pytest.raises(SinkError) as info:
        Driver(built.sink).offer_all([("not a number", "not a time")])
    assert info.value.error_class is ErrorClass.FATAL
    assert "id (UInt64)" in info.value.reason and "at (DateTime)" in info.value.reason
    built.sink.close()


def test_b29_an_unreachable_replica_fails_start_naming_it(fronts: list[ChFront]) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    built = build_sink(
        {
            "table": "t",
            "columns": ["id"],
            "shards": [{"replicas": [url]}],
            "timeouts": {"connect": "1s"},
        }
    )
    with pytest.raises(SinkError) as info:
        built.sink.start()
    assert url in info.value.reason
    built.sink.close()


def test_b29_an_unknown_table_fails_start_naming_table_and_replica(fronts: list[ChFront]) -> None:
    built = build_sink(
        {"table": "nowhere", "columns": ["id"], "shards": [{"replicas": [fronts[0].url]}]}
    )
    with pytest.raises(SinkError, match=f"table nowhere does not exist on {fronts[0].url}"):
        built.sink.start()
    built.sink.close()


def test_a_database_prefixed_table_is_written_in_that_database(fronts: list[ChFront]) -> None:
    client = fronts[1].client()
    client.command("CREATE DATABASE IF NOT EXISTS analytics")
    client.command(
        "CREATE TABLE analytics.events (id UInt64, v String) ENGINE = MergeTree ORDER BY id"
    )
    client.command("CREATE TABLE events (id UInt64, v String) ENGINE = MergeTree ORDER BY id")
    built = build_sink(
        {
            "table": "analytics.events",
            "columns": ["id", "v"],
            "shards": [{"replicas": [fronts[1].url]}],
            "validate_schema": "full",
        }
    )
    built.sink.start()
    driver = Driver(built.sink)
    driver.offer_all([(i, f"v{i}") for i in range(500)])
    assert driver.finish() and driver.all_delivered
    built.sink.close()
    assert client.query("SELECT count() FROM analytics.events").result_rows[0][0] == 500
    assert client.query("SELECT count() FROM default.events").result_rows[0][0] == 0


def test_validate_schema_off_checks_nothing_but_still_learns_the_types(
    fronts: list[ChFront],
) -> None:
    fronts[2].client().command(
        "CREATE TABLE s_off (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id"
    )
    fronts[3].client().command(
        "CREATE TABLE s_off (id UInt64, at String) ENGINE = MergeTree ORDER BY id"
    )
    built = build_sink(
        {
            "table": "s_off",
            "columns": ["id", "at"],
            "shards": [{"replicas": [fronts[2].url, fronts[3].url]}],
            "validate_schema": "off",
        }
    )
    built.sink.start()  # the disagreement between replicas goes unnoticed with off
    driver = Driver(built.sink)
    # the types come from the first replica: a DateTime column takes epoch seconds
    driver.offer_all([(1, 1_700_000_000)])
    assert driver.finish() and driver.all_delivered
    built.sink.close()
    back = fronts[2].client().query("SELECT toUnixTimestamp(at) FROM s_off").result_rows
    assert back == [(1_700_000_000,)]


def test_b20_b29_a_schema_failure_stops_the_pipeline_before_anything_is_consumed(
    fronts: list[ChFront],
) -> None:
    fronts[0].client().command("CREATE TABLE s_pipe (id UInt64) ENGINE = MergeTree ORDER BY id")
    source, handle = memory_source({0: [b"1", b"2", b"3"]}, stream="orders")
    pipeline = Pipeline(
        "schema-stop",
        source,
        {
            "events": build_sink(
                {
                    "table": "s_pipe",
                    "columns": ["id", "missing"],
                    "shards": [{"replicas": [fronts[0].url]}],
                }
            ).sink
        },
        handle_signals=False,
    ).chains(lambda ctx: ctx.chain().map(lambda v: (int(bytes(v)), "x")).sink("events"))
    with pytest.raises(SinkError, match="column missing not in s_pipe on " + fronts[0].url):
        pipeline.run()
    assert handle.commits == [] and handle.last_committed(0) is None
    assert fronts[0].client().query("SELECT count() FROM s_pipe").result_rows[0][0] == 0
