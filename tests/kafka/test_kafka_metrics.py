"""B23 on the real broker: the source's lag and rebalance series exist once per lane and
event, labelled with the connector's name, so ``sum()`` over them counts nothing twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spate import Pipeline
from spate.config import load_config

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
    config.write_text(
        json.dumps(
            {
                "pipeline": {"name": unique_name("metrics")},
                "checkpoint": {"interval": "200ms"},
                "admin": {"listen": "none"},
                "source": {
                    "kafka": {
                        "brokers": kafka_bootstrap,
                        "topic": topic,
                        "group_id": unique_name("g"),
                        "stop_at": "end",
                        "statistics_interval": "100ms",
                    }
                },
                "sink": {"capture": {}},
            }
        )
    )
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
