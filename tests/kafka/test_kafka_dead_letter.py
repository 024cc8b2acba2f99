"""Dead letters on the real broker and the ClickHouse HTTP front (B71, B72, B73).

A topic holds valid Avro records interleaved with four kinds of bad ones: truncated Avro
(the deserializer fails), an ``attrs`` field that is not JSON (a ``try_map`` raises), a
``qty`` that overflows its ``UInt8`` column (the sink refuses the row) and a negative id
(an operator raises under the chain's ``on_error``). The pipeline runs with every policy
at ``dead_letter`` and a Kafka dead-letter topic. Every good record must be in ClickHouse,
every bad one in the dead-letter topic with its original key and value and the right
``spate.error.*`` headers, the dead-letter metrics must match the counts exactly, and no
committed offset may pass a record that is in neither place (B71, sampled while the run
goes). ``spate dlq inspect`` lists them; ``spate dlq replay --filter reason=ValueError``
re-injects the operator failures into the source topic, and a run with the operator fixed
delivers them (B73).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest
from spate import Pipeline
from spate.metrics import Meter
from spate.ops._deadletter import ROW_COLUMNS

from tests.kafka._pipeline import kafka_source, pipeline_document, write_document
from tests.support.avro_native import needs_avro_columnar
from tests.support.delivery import DeliverySampler
from tests.support.scale import scaled
from tests.support.schema_registry import SchemaRegistryServer
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = pytest.mark.integration

JSON_DEAD_LETTER: dict[str, object] = {"json": {"on_error": "dead_letter"}}
"""The ``deserializer:`` section of the JSON cases: a malformed value is a dead letter."""

SPATE = Path(sys.executable).parent / "spate"
PARTITIONS = 3
SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "long"},
        {"name": "attrs", "type": "string"},
    ],
}
BAD_KINDS = {3: "truncated", 5: "not_json", 7: "overflow", 9: "negative"}
EXPECTED = {
    "truncated": ("deserializer", "malformed"),
    "not_json": ("operator", "JSONDecodeError"),
    "overflow": ("sink", "record_error"),
    "negative": ("operator", "ValueError"),
}


def _kind(i: int) -> str:
    return BAD_KINDS.get(i % 10, "good")


def _confluent(schema_id: int, datum: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), datum)
    return b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue()


def _value(schema_id: int, i: int) -> bytes:
    kind = _kind(i)
    datum = {"id": i, "qty": 7, "attrs": json.dumps({"n": i})}
    if kind == "not_json":
        datum["attrs"] = "{not json"
    elif kind == "overflow":
        datum["qty"] = 300
    elif kind == "negative":
        datum["id"] = -i
    encoded = _confluent(schema_id, datum)
    if kind == "truncated":
        return encoded[:6]
    return encoded


def make_chains(fixed: bool) -> Any:
    """The user's chain; ``fixed`` accepts negative ids (the fix before a replay)."""

    def parse_attrs(rec: dict[str, Any]) -> dict[str, Any]:
        return {**rec, "attrs": json.loads(rec["attrs"])}

    def check(rec: dict[str, Any]) -> dict[str, Any]:
        if rec["id"] < 0 and not fixed:
            raise ValueError(f"negative id {rec['id']}")
        ident = abs(rec["id"])
        return {"id": ident, "qty": rec["qty"], "attrs": json.dumps(rec["attrs"])}

    def chains(ctx: Any) -> Any:
        return ctx.chain(on_error="dead_letter").try_map(parse_attrs, "dead_letter").map(check)

    return chains


def _query(url: str, sql: str) -> str:
    request = urllib.request.Request(url + "/", data=sql.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        text: str = response.read().decode()
        return text


def _dead_letter_table(url: str, name: str) -> None:
    """A ClickHouse table of ``format: row`` dead letters (the columns of ROW_COLUMNS)."""
    _query(
        url,
        f"CREATE TABLE {name} (key Nullable(String), payload String, error_stage String, "
        "error_reason String, error_message String, source_topic String, "
        "source_partition UInt32, source_offset UInt64, source_timestamp UInt64, "
        "pipeline String) ENGINE = MergeTree ORDER BY source_offset",
    )


def _table_keys(url: str, table: str) -> list[bytes]:
    text = _query(url, f"SELECT id FROM {table} FORMAT TSV")
    return [b"k%d" % int(line) for line in text.split()]


def _dlq_records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes, dict[str, str]]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("dlq-read"),
            "enable.auto.commit": False,
        }
    )
    try:
        out: list[tuple[bytes, bytes, dict[str, str]]] = []
        for partition, end in end_offsets(bootstrap, topic).items():
            if end == 0:
                continue
            consumer.assign([TopicPartition(topic, partition, 0)])
            while True:
                msg = consumer.poll(10)
                assert msg is not None, "the dead-letter topic did not answer"
                assert msg.error() is None, msg.error()
                headers = {k: (v or b"").decode() for k, v in msg.headers() or []}
                out.append((msg.key(), msg.value(), headers))
                if msg.offset() + 1 >= end:
                    break
        return out
    finally:
        consumer.close()


def _config(
    path: Path,
    *,
    bootstrap: str,
    topic: str,
    group: str,
    dlq: str,
    ch: str,
    table: str,
    registry: str,
    stop_at: str = "end",
) -> Path:
    source = kafka_source(
        bootstrap, topic, group, stop_at=stop_at, consume_batch=200, session_timeout_ms=None
    )
    sink = {
        "clickhouse": {
            "table": table,
            "columns": ["id", "qty", "attrs"],
            "shards": [{"replicas": [ch]}],
            "batch": {"max_rows": 150, "linger": "200ms"},
            "on_record_error": "dead_letter",
        }
    }
    dead_letter = {
        "sink": {
            "kafka": {
                "brokers": bootstrap,
                "topic": dlq,
                "batch": {"max_rows": 50, "linger": "200ms"},
                # A slow dead-letter topic: each write waits 1.5s for the
                # producer, so a commit ahead of it would be sampled (B71).
                "rdkafka": {"linger.ms": 1500},
            }
        },
        "max_ratio": 0.9,
        "max_consecutive": 10,
    }
    deserializer = {"avro": {"registry": {"url": registry}, "on_error": "dead_letter"}}
    document = pipeline_document(
        "dlq-e2e",
        source,
        sink,
        drain_timeout="30s",
        deserializer=deserializer,
        dead_letter=dead_letter,
    )
    write_document(path, document)
    return path


def _run(config: Path, chains: Any, until: Callable[[], bool] | None = None) -> tuple[int, Meter]:
    """Run the pipeline in this process; with ``until``, stop it once that holds."""
    pipeline = Pipeline.from_config(config, chains=chains, handle_signals=False)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(pipeline.run().exit_code))
    thread.start()
    if until is not None:
        deadline = time.monotonic() + 300
        while not until():
            assert thread.is_alive() and time.monotonic() < deadline, "the run never caught up"
            time.sleep(0.2)
        pipeline.request_stop("test done")
    thread.join(600)
    assert result, "the run did not end"
    return result[0], pipeline.meter


def _metric(meter: Meter, name: str, **labels: str) -> float:
    value = meter.registry.get_sample_value(
        name, {"pipeline": meter.pipeline, "component": "dead_letter", **labels}
    )
    return 0.0 if value is None else value


def _orders_table(url: str, prefix: str) -> str:
    """A new ``(id Int64, qty UInt8, attrs String)`` table named with ``prefix``."""
    table = prefix + unique_name("t").replace("-", "_")
    sql = f"CREATE TABLE {table} (id Int64, qty UInt8, attrs String) ENGINE = MergeTree ORDER BY id"
    _query(url, sql)
    return table


def _check_letters(
    letters: list[tuple[bytes, bytes, dict[str, str]]],
    bad: dict[bytes, str],
    positions: dict[bytes, tuple[int, int]],
    schema_id: int,
    meter: Meter,
    topic: str,
) -> None:
    """The dead-letter topic holds exactly the ``bad`` records (key -> kind), each with
    its original value and its ``spate.error.*`` headers, and the metrics count them."""
    assert sorted(k for k, _, _ in letters) == sorted(bad)
    by_kind: dict[str, int] = {}
    for key, value, headers in letters:
        kind = bad[key]
        by_kind[kind] = by_kind.get(kind, 0) + 1
        partition, offset = positions[key]
        assert value == _value(schema_id, int(key[1:]))  # the original payload, unchanged
        assert (headers["spate.error.stage"], headers["spate.error.reason"]) == EXPECTED[kind]
        assert headers["spate.error.source.topic"] == topic
        assert headers["spate.error.source.partition"] == str(partition)
        assert headers["spate.error.source.offset"] == str(offset)
        assert int(headers["spate.error.source.timestamp"]) > 0
        assert headers["spate.error.pipeline"] == "dlq-e2e"
        assert headers["spate.error.message"]
    for kind in set(bad.values()):
        stage, reason = EXPECTED[kind]
        labels = {"stage": stage, "reason": reason, "component_type": "dead_letter"}
        assert _metric(meter, "spate_dead_letter_records_total", **labels) == by_kind[kind], kind


def _spate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SPATE), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


@pytest.mark.timeout(900)
def test_bad_records_reach_the_dead_letter_topic_and_replay_delivers_them_b71_b73(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path
) -> None:
    topic, dlq, group = unique_name("dlq-src"), unique_name("dlq"), unique_name("g")
    table = _orders_table(clickhouse_url, "dlq_")
    count = scaled(3000, minimum=400)
    with SchemaRegistryServer() as registry:
        schema_id = registry.register("orders-value", SCHEMA)
        create_topic(kafka_bootstrap, topic, PARTITIONS)
        create_topic(kafka_bootstrap, dlq, 1)
        positions = produce_keyed(
            kafka_bootstrap, topic, count, value=lambda i: _value(schema_id, i)
        )
        settings = {
            "bootstrap": kafka_bootstrap,
            "topic": topic,
            "group": group,
            "dlq": dlq,
            "ch": clickhouse_url,
            "table": table,
            "registry": registry.url,
        }
        # The first run consumes without end, so offsets are committed while dead letters
        # are still being written (the slow dead-letter topic), and stops once all is
        # committed; the bounded config is the one the CLI and the replay run use.
        unbounded = _config(tmp_path / "u.json", **settings, stop_at="never")
        config = _config(tmp_path / "c.json", **settings)

        def delivered() -> list[bytes]:
            return _table_keys(clickhouse_url, table) + [
                k for k, _, _ in _dlq_records(kafka_bootstrap, dlq)
            ]

        sampler = DeliverySampler(kafka_bootstrap, group, topic, positions, delivered)
        sampler.start(every=0.2)
        ends = end_offsets(kafka_bootstrap, topic)
        try:
            exit_code, meter = _run(
                unbounded,
                make_chains(fixed=False),
                until=lambda: committed_offsets(kafka_bootstrap, group, topic) == ends,
            )
        finally:
            sampler.stop()
        assert exit_code == 0

        kinds = {b"k%d" % i: _kind(i) for i in range(count)}
        good = {k for k, kind in kinds.items() if kind == "good"}
        bad = {k: kind for k, kind in kinds.items() if kind != "good"}
        assert set(_table_keys(clickhouse_url, table)) == good
        assert len(_table_keys(clickhouse_url, table)) == len(good)

        letters = _dlq_records(kafka_bootstrap, dlq)
        _check_letters(letters, bad, positions, schema_id, meter, topic)

        # Offsets are committed to the end, and never ahead of both writes (B71).
        assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(
            kafka_bootstrap, topic
        )
        sampler.sample()
        assert len(sampler.samples) >= 2
        assert not sampler.violations(), sampler.violations()[:3]

        # spate dlq inspect prints them with their errors (B73).
        inspected = _spate("dlq", "inspect", str(config), "--json")
        assert inspected.returncode == 0, inspected.stderr
        lines = [json.loads(line) for line in inspected.stdout.splitlines()]
        assert len(lines) == len(bad)
        assert {line["error"]["reason"] for line in lines} == {r for _, r in EXPECTED.values()}

        # Replay the operator failures after fixing the operator: they are delivered.
        replayed = _spate("dlq", "replay", str(config), "--filter", "reason=ValueError")
        assert replayed.returncode == 0, replayed.stderr
        negatives = {k for k, kind in bad.items() if kind == "negative"}
        assert f"replayed {len(negatives)} record(s)" in replayed.stdout
        exit_code, meter = _run(config, make_chains(fixed=True))
        assert exit_code == 0
        assert set(_table_keys(clickhouse_url, table)) == good | negatives
        assert (
            _metric(
                meter,
                "spate_dead_letter_records_total",
                stage="operator",
                reason="ValueError",
                component_type="dead_letter",
            )
            == 0
        )


@pytest.mark.timeout(600)
def test_dead_letters_into_a_clickhouse_table_b71(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path
) -> None:
    """A ClickHouse table as the dead-letter sink: payload as text, the error as columns."""
    topic, group = unique_name("dlq-json"), unique_name("g")
    suffix = unique_name("t").replace("-", "_")
    good, dead = f"dlq_good_{suffix}", f"dlq_dead_{suffix}"
    _query(clickhouse_url, f"CREATE TABLE {good} (id Int64) ENGINE = MergeTree ORDER BY id")
    _dead_letter_table(clickhouse_url, dead)
    create_topic(kafka_bootstrap, topic, 1)
    count = 60
    positions = produce_keyed(
        kafka_bootstrap,
        topic,
        count,
        value=lambda i: b"{not json" if i % 7 == 0 else json.dumps({"id": i}).encode(),
        partition=0,
    )
    config = tmp_path / "c.json"
    source = kafka_source(kafka_bootstrap, topic, group, stop_at="end", session_timeout_ms=None)
    sink = {
        "clickhouse": {
            "table": good,
            "columns": ["id"],
            "shards": [{"replicas": [clickhouse_url]}],
        }
    }
    dead_letter = {
        "sink": {
            "clickhouse": {
                "table": dead,
                "columns": list(ROW_COLUMNS),
                "shards": [{"replicas": [clickhouse_url]}],
            }
        }
    }
    document = pipeline_document(
        "dlq-table",
        source,
        sink,
        drain_timeout=None,
        deserializer=JSON_DEAD_LETTER,
        dead_letter=dead_letter,
    )
    write_document(config, document)
    exit_code, _ = _run(config, None)
    assert exit_code == 0
    bad = sorted(i for i in range(count) if i % 7 == 0)
    ids = [int(x) for x in _query(clickhouse_url, f"SELECT id FROM {good} FORMAT TSV").split()]
    assert sorted(ids) == [i for i in range(count) if i % 7]
    rows = [
        json.loads(line)
        for line in _query(
            clickhouse_url,
            f"SELECT key, payload, error_stage, error_reason, source_topic, source_offset, "
            f"pipeline FROM {dead} ORDER BY source_offset FORMAT JSONEachRow",
        ).splitlines()
    ]
    assert [r["key"] for r in rows] == [f"k{i}" for i in bad]
    assert {r["payload"] for r in rows} == {"{not json"}
    assert {(r["error_stage"], r["error_reason"]) for r in rows} == {("deserializer", "malformed")}
    assert [int(r["source_offset"]) for r in rows] == [positions[b"k%d" % i][1] for i in bad]
    assert {(r["source_topic"], r["pipeline"]) for r in rows} == {(topic, "dlq-table")}
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)


@pytest.mark.timeout(600)
def test_a_dead_letter_table_that_is_down_holds_commits_until_it_is_back_b71(
    kafka_bootstrap: str, clickhouse_url: str, chfront: Any, tmp_path: Path
) -> None:
    """The dead-letter table's front answers 5xx to every insert: good rows are written,
    but no offset is committed past a record whose dead letter is not written; once the
    front recovers, every dead letter is written and the offsets reach the end."""
    topic, group = unique_name("dlq-down"), unique_name("g")
    suffix = unique_name("t").replace("-", "_")
    good, dead = f"dlq_good_{suffix}", f"dlq_dead_{suffix}"
    dl_front = chfront()
    _query(clickhouse_url, f"CREATE TABLE {good} (id Int64) ENGINE = MergeTree ORDER BY id")
    _dead_letter_table(dl_front.url, dead)
    create_topic(kafka_bootstrap, topic, 1)
    count = 200
    produce_keyed(
        kafka_bootstrap,
        topic,
        count,
        value=lambda i: b"{not json" if i % 20 == 10 else json.dumps({"id": i}).encode(),
        partition=0,
    )
    first_bad = 10
    dl_front.inject("5xx", only="insert")
    fast_retry = {"initial": "100ms", "max": "500ms"}
    config = tmp_path / "c.json"
    source = kafka_source(
        kafka_bootstrap,
        topic,
        group,
        stop_at=None,
        consume_batch=25,
        session_timeout_ms=None,
    )
    sink = {
        "clickhouse": {
            "table": good,
            "columns": ["id"],
            "shards": [{"replicas": [clickhouse_url]}],
            "batch": {"max_rows": 20},
        }
    }
    dead_letter = {
        "sink": {
            "clickhouse": {
                "table": dead,
                "columns": list(ROW_COLUMNS),
                "shards": [{"replicas": [dl_front.url]}],
                "retry": fast_retry,
                "breaker": {"open_for": "1s"},
            }
        }
    }
    document = pipeline_document(
        "dlq-down",
        source,
        sink,
        drain_timeout="30s",
        deserializer=JSON_DEAD_LETTER,
        dead_letter=dead_letter,
    )
    write_document(config, document)
    pipeline = Pipeline.from_config(config, handle_signals=False)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(pipeline.run().exit_code))
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while len(_table_keys(clickhouse_url, good)) < first_bad:
            assert thread.is_alive() and time.monotonic() < deadline, "no good rows written"
            time.sleep(0.2)
        # The dead-letter table stays down for a while: commits must not pass offset 10.
        held: list[int] = []
        for _ in range(15):
            assert thread.is_alive(), "the pipeline must wait for the dead-letter table"
            held.append(committed_offsets(kafka_bootstrap, group, topic).get(0, 0))
            time.sleep(0.2)
        assert max(held) <= first_bad, held
        dl_front.recover()
        ends = end_offsets(kafka_bootstrap, topic)
        while committed_offsets(kafka_bootstrap, group, topic) != ends:
            assert thread.is_alive() and time.monotonic() < deadline + 120, "never caught up"
            time.sleep(0.2)
    finally:
        pipeline.request_stop("test done")
        thread.join(120)
    assert result == [0]
    offsets = sorted(
        int(x) for x in _query(dl_front.url, f"SELECT source_offset FROM {dead} FORMAT TSV").split()
    )
    assert offsets == [i for i in range(count) if i % 20 == 10]
    assert sorted(int(k[1:]) for k in _table_keys(clickhouse_url, good)) == [
        i for i in range(count) if i % 20 != 10
    ]


@needs_avro_columnar
@pytest.mark.timeout(600)
def test_columnar_bad_records_reach_the_dead_letter_topic_b71_b148(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path
) -> None:
    """The columnar path (a frame chain) with a Kafka dead-letter topic: truncated Avro
    (the batch decoder's record error) and a ``qty`` its ``UInt8`` column cannot take
    (the sink's ``prepare_frame`` refuses it) reach the topic with the row path's headers
    and counts; every other record is in ClickHouse, and no committed offset passes a
    record that is in neither place (B71, B148, sampled while the run goes)."""
    topic, dlq, group = unique_name("dlq-col"), unique_name("dlq"), unique_name("g")
    table = _orders_table(clickhouse_url, "dlq_col_")
    count = scaled(3000, minimum=400)
    # No per-record operator on this path: bad attrs and negative ids are good records.
    bad = {b"k%d" % i: _kind(i) for i in range(count) if _kind(i) in ("truncated", "overflow")}
    with SchemaRegistryServer() as registry:
        schema_id = registry.register("orders-value", SCHEMA)
        create_topic(kafka_bootstrap, topic, PARTITIONS)
        create_topic(kafka_bootstrap, dlq, 1)
        positions = produce_keyed(
            kafka_bootstrap, topic, count, value=lambda i: _value(schema_id, i)
        )
        config = _config(
            tmp_path / "c.json",
            bootstrap=kafka_bootstrap,
            topic=topic,
            group=group,
            dlq=dlq,
            ch=clickhouse_url,
            table=table,
            registry=registry.url,
            stop_at="never",
        )

        def table_keys() -> list[bytes]:
            text = _query(clickhouse_url, f"SELECT id FROM {table} FORMAT TSV")
            return [b"k%d" % abs(int(line)) for line in text.split()]

        def delivered() -> list[bytes]:
            return table_keys() + [k for k, _, _ in _dlq_records(kafka_bootstrap, dlq)]

        sampler = DeliverySampler(kafka_bootstrap, group, topic, positions, delivered)
        sampler.start(every=0.2)
        ends = end_offsets(kafka_bootstrap, topic)
        try:
            exit_code, meter = _run(
                config,
                lambda ctx: ctx.frames().sink(),
                until=lambda: committed_offsets(kafka_bootstrap, group, topic) == ends,
            )
        finally:
            sampler.stop()
        assert exit_code == 0

    keys = table_keys()
    assert sorted(keys) == sorted(b"k%d" % i for i in range(count) if b"k%d" % i not in bad)
    letters = _dlq_records(kafka_bootstrap, dlq)
    _check_letters(letters, bad, positions, schema_id, meter, topic)
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)
    sampler.sample()
    assert len(sampler.samples) >= 2
    assert not sampler.violations(), sampler.violations()[:3]
