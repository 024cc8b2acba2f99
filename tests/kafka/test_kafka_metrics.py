"""B23 on the real broker: the source's lag and rebalance series exist once per lane and
event, labelled with the connector's name, so ``sum()`` over them counts nothing twice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from spate import Pipeline, load_config
from spate.metrics import names
from spate.metrics._meter import Meter

from tests.kafka._pipeline import kafka_source, pipeline_document, write_document
from tests.support.services import create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

PARTITIONS = 3


def test_b23_one_lag_and_rebalance_series_per_lane_labelled_kafka(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = unique_name("metrics")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce_keyed(kafka_bootstrap, topic, 300)
    config = tmp_path / "p.json"
    name = unique_name("metrics")
    source = kafka_source(
        kafka_bootstrap,
        topic,
        unique_name("g"),
        stop_at="end",
        commit_interval=None,
        session_timeout_ms=None,
        statistics_interval="100ms",
    )
    write_document(config, pipeline_document(name, source, {"capture": {}}, drain_timeout=None))
    pipeline = Pipeline.from_config(load_config(config), handle_signals=False)
    report = pipeline.run()
    assert report.exit_code == 0, report.reason
    assert report.records_in == 300
    series: dict[str, list[dict[str, str]]] = {}
    for family in pipeline.meter.registry.collect():
        for sample in family.samples:
            if sample.name in ("spate_source_lag_records", "spate_source_rebalances_total"):
                series.setdefault(sample.name, []).append(sample.labels)
    lanes = [labels["lane"] for labels in series["spate_source_lag_records"]]
    assert sorted(lanes) == sorted(f"{topic}[{p}]" for p in range(PARTITIONS))
    events = [labels["event"] for labels in series["spate_source_rebalances_total"]]
    assert sorted(events) == ["assigned", "revoked"]
    for labels in [*series["spate_source_lag_records"], *series["spate_source_rebalances_total"]]:
        assert (labels["component"], labels["component_type"]) == ("source", "kafka"), labels


class _Events:
    def __init__(self) -> None:
        self.drained_seen = False

    def assigned(self, lanes: object) -> None:
        pass

    def revoked(self, lanes: object) -> None:
        pass

    def drained(self) -> None:
        self.drained_seen = True


def test_a_bounded_kafka_source_says_how_many_records_remain(kafka_bootstrap: str) -> None:
    """What the CLI's progress bar reads: records left before the end offsets seen at start."""
    from spate.config import decode
    from spate.source import BoundedSource
    from spate_kafka import KafkaSource, KafkaSourceConfig

    topic = unique_name("remaining")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce_keyed(kafka_bootstrap, topic, 300)
    config = decode(
        KafkaSourceConfig,
        {
            "brokers": kafka_bootstrap,
            "topic": topic,
            "group_id": unique_name("g"),
            "stop_at": "end",
        },
        "source.kafka",
    )
    source = KafkaSource(config)
    assert isinstance(source, BoundedSource)
    assert source.remaining() is None  # not started
    events = _Events()
    source.start(events)
    try:
        received = 0
        deadline = time.monotonic() + 60
        while not events.drained_seen and time.monotonic() < deadline:
            for batch in source.poll(0.2):
                received += len(batch.payloads)
                left = source.remaining()
                assert left is None or left <= 300 - received
        assert received == 300
        assert source.remaining() == 0
    finally:
        source.close()
    unbounded = KafkaSource(
        decode(
            KafkaSourceConfig,
            {"brokers": kafka_bootstrap, "topic": topic, "group_id": unique_name("g")},
            "source.kafka",
        )
    )
    assert unbounded.remaining() is None


def _lag_sums(meter: Meter) -> tuple[float, float]:
    position = meter.totals(names.SOURCE_LAG, "lane").values()
    committed = meter.totals(names.SOURCE_COMMITTED_LAG, "lane").values()
    return sum(position), sum(committed)


def test_b23_position_lag_and_committed_lag_on_the_real_broker(kafka_bootstrap: str) -> None:
    """Reading ahead of the commit: the position lag falls to 0 as records are taken while
    the committed lag still counts them (what a crash would replay), until the commit."""
    from spate.config import decode
    from spate.records import Lane
    from spate_kafka import KafkaSource, KafkaSourceConfig

    topic = unique_name("lag")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce_keyed(kafka_bootstrap, topic, 300)
    meter = Meter(unique_name("lag"))
    config = decode(
        KafkaSourceConfig,
        {
            "brokers": kafka_bootstrap,
            "topic": topic,
            "group_id": unique_name("g"),
            "statistics_interval": "100ms",
        },
        "source.kafka",
    )
    source = KafkaSource(config, meter=meter)
    source.start(_Events())
    try:
        taken: dict[Lane, int] = {}
        received = 0
        deadline = time.monotonic() + 60
        while received < 300 and time.monotonic() < deadline:
            for batch in source.poll(0.2):
                received += len(batch.payloads)
                taken[batch.lane] = batch.last_offset + 1
        assert received == 300
        deadline = time.monotonic() + 30
        while _lag_sums(meter) != (0, 300) and time.monotonic() < deadline:
            source.poll(0.1)
        assert _lag_sums(meter) == (0, 300)
        source.commit(taken, sync=True)
        deadline = time.monotonic() + 30
        while _lag_sums(meter) != (0, 0) and time.monotonic() < deadline:
            source.poll(0.1)
        assert _lag_sums(meter) == (0, 0)
    finally:
        source.close()
