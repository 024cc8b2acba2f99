"""Kafka (real broker) -> Parquet on S3 (moto) with kill -9 mid-window, twice (B1, B50, B51).

One topic of JSON records is written twice to the same bucket: a clean bounded run, and
a run killed twice while it writes, then restarted to the end. The parts (the data
objects) of both runs are the same objects with the same bytes; read back through the
manifest — with pyarrow and with chDB's ``s3()`` table function — every record is there
exactly once; and while the killed run ran, the group's committed offsets never passed
a record that was not in a published part.
"""

from __future__ import annotations

import io
import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.kafka._pipeline import (
    JSON_VALUES,
    kafka_source,
    pipeline_document,
    start_pipeline,
    write_document,
)
from tests.s3.s3kit import s3_client
from tests.support.delivery import DeliverySampler, wait_until
from tests.support.scale import scaled
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PARTITIONS = 3
TABLE = "orders"


def write_config(
    path: Path,
    *,
    bootstrap: str,
    topic: str,
    group: str,
    endpoint: str,
    bucket: str,
    run: str,
    consume_batch: int,
) -> Path:
    source = kafka_source(bootstrap, topic, group, stop_at="end", consume_batch=consume_batch)
    sink = {
        "parquet": {
            "path": f"s3://{bucket}/{run}",
            "publish": "manifest",
            "table": TABLE,
            "schema": {"key": "string", "n": "int64", "note": "string"},
            "max_records": 150,
            "s3": {"endpoint_url": endpoint, "region": "us-east-1"},
        }
    }
    document = pipeline_document(
        f"parquet-{run}", source, sink, drain_timeout="30s", deserializer=JSON_VALUES
    )
    return write_document(path, document)


class Bucket:
    """Reads a run's parts through its published manifest (parts are cached: immutable)."""

    def __init__(self, endpoint: str, name: str) -> None:
        self.client = s3_client(endpoint)
        self.name = name
        self._parts: dict[str, bytes] = {}

    def objects(self, run: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.name, Prefix=f"{run}/"
        ):
            for item in page.get("Contents", ()):
                key = item["Key"]
                out[key[len(run) + 1 :]] = self._get(key)
        return out

    def _get(self, key: str) -> bytes:
        data = self._parts.get(key)
        if data is None:
            data = self.client.get_object(Bucket=self.name, Key=key)["Body"].read()
            if key.endswith(".parquet"):
                self._parts[key] = data
        return data

    def published(self, run: str) -> list[str]:
        try:
            pointer = self._get(f"{run}/{TABLE}.parts/_manifest.json")
        except self.client.exceptions.NoSuchKey:
            return []
        return [part["path"] for part in json.loads(pointer)["parts"]]

    def keys(self, run: str) -> list[bytes]:
        """The record keys in the published parts."""
        keys: list[bytes] = []
        for path in self.published(run):
            table = pq.read_table(io.BytesIO(self._get(f"{run}/{path}")), columns=["key"])
            keys.extend(k.encode() for k in table.column("key").to_pylist())
        return keys


def _run_to_end(config: Path, log: Path) -> None:
    proc = start_pipeline(config, log)
    assert proc.wait(600) == 0, log.read_text(errors="replace")[-3000:]


def test_kill_9_mid_window_twice_replays_the_same_parts_and_every_record_once(
    kafka_bootstrap: str, s3_endpoint: str, tmp_path: Path
) -> None:
    topic = unique_name("parquet")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    count = scaled(60_000, minimum=9_000)
    positions = produce_keyed(
        kafka_bootstrap,
        topic,
        count,
        value=lambda i: json.dumps({"key": f"k{i}", "n": i, "note": "x" * (i % 13)}).encode(),
    )
    bucket = Bucket(s3_endpoint, unique_name("lake"))
    bucket.client.create_bucket(Bucket=bucket.name)

    def config(run: str, group: str, consume_batch: int) -> Path:
        return write_config(
            tmp_path / f"{run}.json",
            bootstrap=kafka_bootstrap,
            topic=topic,
            group=group,
            endpoint=s3_endpoint,
            bucket=bucket.name,
            run=run,
            consume_batch=consume_batch,
        )

    _run_to_end(config("clean", unique_name("g"), 300), tmp_path / "clean.log")

    group = unique_name("g")
    # Other batch sizes: commits fall inside windows, so a replay starts mid-window.
    crashed = config("crashed", group, 97)
    sampler = DeliverySampler(
        kafka_bootstrap, group, topic, positions, lambda: bucket.keys("crashed")
    )
    sampler.start(every=0.3)
    log = tmp_path / "crashed.log"
    total_parts = len(bucket.published("clean"))
    for fraction in (0.15, 0.5):
        proc = start_pipeline(crashed, log)
        target = int(total_parts * fraction)
        wait_until(
            lambda t=target, p=proc: len(bucket.published("crashed")) >= t or p.poll() is not None,
            300,
            f"{target} parts published",
        )
        assert proc.poll() is None, "the run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    _run_to_end(crashed, log)
    sampler.stop()
    sampler.sample()
    assert not sampler.violations(), sampler.violations()[:3]
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)

    clean, again = bucket.objects("clean"), bucket.objects("crashed")
    parts = sorted(k for k in clean if k.endswith(".parquet"))
    assert parts == sorted(k for k in again if k.endswith(".parquet"))
    assert [k for k in parts if clean[k] != again[k]] == []
    assert sorted(bucket.published("crashed")) == sorted(bucket.published("clean")) == parts

    counts = Counter(bucket.keys("crashed"))
    assert set(counts) == set(positions) and max(counts.values()) == 1

    chdb = pytest.importorskip("chdb")
    urls = ",".join(p.rsplit("/", 1)[-1] for p in bucket.published("crashed"))
    directory = f"{s3_endpoint}/{bucket.name}/crashed/{TABLE}.parts"
    query = (
        f"SELECT count(), uniqExact(key) FROM s3('{directory}/{{{urls}}}', "
        "'testing', 'testing', 'Parquet')"
    )
    rows: Any = chdb.query(query, "CSV").data().strip().split(",")
    assert [int(v) for v in rows] == [count, count]
