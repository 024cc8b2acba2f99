"""examples/kafka_to_parquet.py on the real broker: every event lands once in a published
part, chDB's totals over the manifest's parts match the events, the run exits 0."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spate import Pipeline, load_config
from spate_datagen import storefront_events
from spate_datagen.cli import produce_events

from tests.support.scale import scaled
from tests.support.services import create_topic, unique_name

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kafka_to_parquet.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("kafka_to_parquet", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parquet_example_writes_every_event_once_and_chdb_reads_the_manifest(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique_name("events")
    create_topic(kafka_bootstrap, topic, 3)
    count = scaled(20_000, minimum=2_000)
    produce_events(kafka_bootstrap, topic, count, fmt="json")
    lake = tmp_path / "lake"
    env = {
        "KAFKA_BROKERS": kafka_bootstrap,
        "KAFKA_TOPIC": topic,
        "KAFKA_GROUP": unique_name("g"),
        "PARQUET_PATH": str(lake),
        "MAX_RECORDS": "700",
        "STOP_AT": "end",
        "SPATE_ADMIN_LISTEN": "none",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    example = load_example()
    pipeline = Pipeline.from_config(load_config(example.CONFIG), handle_signals=False)
    report = pipeline.chains(example.chains).run()
    assert report.exit_code == 0, report.summary()

    expected: Counter[str] = Counter()
    cents: Counter[str] = Counter()
    for event in storefront_events(count):
        row = example.row({"kind": event.kind, **event.record})
        expected[row["kind"]] += 1
        cents[row["kind"]] += row["amount_cents"]
    parts = example.published_parts(lake)
    assert parts and all(p.parent.name.startswith("kind=") for p in parts)
    assert example.totals(lake) == [(k, expected[k], cents[k]) for k in sorted(expected)]
