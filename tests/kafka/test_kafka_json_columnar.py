"""JSON from the real broker into ClickHouse on the columnar path (B86, B87).

Payloads with bad records among them (truncated, two objects in one message, ``NaN``,
an empty message) go through a YAML-only pipeline (``stop_at: end``, no chain) into the
ClickHouse HTTP front over chDB; the run must say it ran columnar, store every good
record once, count the bad ones and the empty one as the row path does, and commit the
partition's end, bad records included (B3, B86).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.support.chfront_fixtures import ChFront
from tests.support.columnar_run import committed_total, deser_count, run_kafka_columnar
from tests.support.scale import scaled

pytest.importorskip("polars")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.integration

YAML = """
pipeline: {name: %(name)s}
admin: {listen: none}
source:
  kafka: {brokers: "%(brokers)s", topic: %(topic)s, group_id: %(group)s, stop_at: end}
deserializer:
  json: {framing: single}
sink:
  clickhouse:
    table: orders
    columns: [order_id, region, amount, placed_at]
    shards: [{replicas: ["%(front)s"]}]
    batch: {linger: 100ms}
"""


def test_b86_json_from_kafka_runs_columnar_keeps_good_records_and_commits_the_end(
    kafka_bootstrap: str, chfront: Callable[..., ChFront], tmp_path: Path
) -> None:
    count = scaled(20_000, minimum=2_000)
    bad = {7: b'{"order_id": 7, "region": ', 500: b'{"order_id": 1}{"order_id": 2}', 1999: b"NaN"}
    empty = 1234

    def value(i: int) -> bytes:
        if i in bad:
            return bad[i]
        if i == empty:
            return b""
        return orjson.dumps(
            {
                "order_id": i,
                "region": f"r{i % 7}",
                "amount": i / 4,
                "placed_at": 1_700_000_000_000 + i,
            }
        )

    run = run_kafka_columnar(
        kafka_bootstrap,
        chfront,
        tmp_path,
        name="jsoncol",
        yaml=YAML,
        table="CREATE TABLE orders (order_id Int64, region LowCardinality(String), "
        "amount Float64, placed_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY order_id",
        count=count,
        value=value,
    )
    client = run.client
    skipped = set(bad) | {empty}
    ids = [r[0] for r in client.query("SELECT order_id FROM orders ORDER BY order_id").result_rows]
    assert ids == [i for i in range(count) if i not in skipped]
    first = client.query("SELECT placed_at FROM orders WHERE order_id = 1").result_rows[0][0]
    assert int(first.timestamp() * 1000) == 1_700_000_000_001  # ticks, as on the row path (B87)
    assert deser_count(run.pipeline, "jsoncol", "skipped") == 3
    assert deser_count(run.pipeline, "jsoncol", "empty") == 1
    assert committed_total(kafka_bootstrap, run) == count
