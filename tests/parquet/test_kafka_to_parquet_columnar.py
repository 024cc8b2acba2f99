"""B53 on the real broker: a YAML pipeline with raw Avro and a Parquet sink and no chain
runs on the columnar path, writes every record once, and a replay of the same topic into
another directory writes byte-identical files under the same names (B50)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from tests.support.avro_native import needs_avro_columnar
from tests.support.columnar_run import run_yaml
from tests.support.scale import scaled
from tests.support.services import create_topic, unique_name

pytestmark = [pytest.mark.integration, needs_avro_columnar]

SCHEMA = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "region", "type": "string"},
        {"name": "note", "type": ["null", "string"]},
    ],
}

YAML = """
pipeline: {name: %(name)s}
admin: {listen: none}
source:
  kafka: {brokers: "%(brokers)s", topic: %(topic)s, group_id: %(group)s, stop_at: end}
deserializer:
  avro: {mode: raw, schema: {inline: '%(schema)s'}}
sink:
  parquet:
    path: "%(path)s"
    schema: {order_id: int64, region: string, note: string}
    partition_by: [region]
    max_records: 300
"""


def _run(tmp: Path, brokers: str, topic: str, lake: Path) -> bool:
    name = unique_name("pq")
    path = tmp / f"{name}.yaml"
    path.write_text(
        YAML
        % {
            "name": name,
            "brokers": brokers,
            "topic": topic,
            "group": unique_name("g"),
            "schema": json.dumps(SCHEMA),
            "path": lake,
        }
    )
    _, report, columnar = run_yaml(path)
    assert report.exit_code == 0, report.summary()
    return columnar


def test_b53_avro_to_parquet_runs_on_columns_and_replays_to_the_same_files(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = unique_name("payments")
    create_topic(kafka_bootstrap, topic, 2)
    count = scaled(6_000, minimum=900)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    parsed = fastavro.parse_schema(SCHEMA)
    for i in range(count):
        out = io.BytesIO()
        record = {
            "order_id": i,
            "region": ("eu", "us", "ap")[i % 3],
            "note": None if i % 4 else "x",
        }
        fastavro.schemaless_writer(out, parsed, record)
        producer.produce(topic, out.getvalue(), partition=i % 2)
    assert producer.flush(30) == 0

    first, second = tmp_path / "first", tmp_path / "second"
    assert _run(tmp_path, kafka_bootstrap, topic, first), "the columnar path did not run"
    assert _run(tmp_path, kafka_bootstrap, topic, second)
    files = sorted(p.relative_to(first) for p in first.rglob("*.parquet"))
    assert files and files == sorted(p.relative_to(second) for p in second.rglob("*.parquet"))
    assert all((first / f).read_bytes() == (second / f).read_bytes() for f in files)
    ids = sorted(i for f in files for i in pq.read_table(first / f).column("order_id").to_pylist())
    assert ids == list(range(count))
    assert {str(f).split("/", 1)[0] for f in files} == {"region=ap", "region=eu", "region=us"}
