"""Run a pipeline and tell whether it ran on the columnar path; the Kafka → ClickHouse
columnar runs the real-broker tests share.

The columnar executor announces itself with one INFO line (``runs on the columnar
path``) when the chain is compiled; the tests that must prove a pipeline ran columnar
(rather than falling back to rows) read that line (:func:`watch_columnar`).
:func:`run_kafka_columnar` produces a topic, creates the ClickHouse table, runs a YAML
pipeline from it to its end and checks it ran columnar; :func:`deser_count` reads the
deserializer's outcome counters and :func:`committed_total` what the group committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spate import ExitReport, Pipeline, load_config

from tests.support.chfront_fixtures import ChFront
from tests.support.services import committed_total as group_committed_total
from tests.support.services import create_topic, produce_keyed, unique_name


class ColumnarSeen(logging.Handler):
    """Whether the ``spate`` loggers said a chain runs on the columnar path."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.columnar = False

    def emit(self, record: logging.LogRecord) -> None:
        self.columnar = self.columnar or "runs on the columnar path" in record.getMessage()


@contextmanager
def watch_columnar() -> Iterator[ColumnarSeen]:
    """Listen to the ``spate`` loggers at INFO while the block runs."""
    seen = ColumnarSeen()
    logger = logging.getLogger("spate")
    logger.addHandler(seen)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield seen
    finally:
        logger.removeHandler(seen)
        logger.setLevel(old_level)


def run_yaml(path: Path | str) -> tuple[Pipeline, ExitReport, bool]:
    """Build and run the pipeline of ``path`` to its end: ``(pipeline, report, columnar)``."""
    with watch_columnar() as seen:
        pipeline = Pipeline.from_config(load_config(str(path)), handle_signals=False)
        report = pipeline.run()
    return pipeline, report, seen.columnar


@dataclass(frozen=True, slots=True)
class KafkaColumnarRun:
    """A finished Kafka → ClickHouse run: the pipeline, the table's client, the topic
    and the consumer group."""

    pipeline: Pipeline
    client: Any
    topic: str
    group: str


def run_kafka_columnar(
    kafka_bootstrap: str,
    chfront: Callable[..., ChFront],
    tmp_path: Path,
    *,
    name: str,
    yaml: str,
    table: str,
    count: int,
    value: Callable[[int], bytes],
    **params: str,
) -> KafkaColumnarRun:
    """Produce ``count`` keyed records (``value(i)``) to a new two-partition topic, create
    the table (``table`` is its ``CREATE TABLE``), run ``yaml`` (formatted with ``name``,
    ``brokers``, ``topic``, ``group``, ``front`` and ``params``) to its end, and check it
    exited 0 on the columnar path."""
    topic, group = unique_name(name), unique_name(f"{name}-g")
    create_topic(kafka_bootstrap, topic, partitions=2)
    produce_keyed(kafka_bootstrap, topic, count, value=value)
    front = chfront()
    client = front.client()
    client.command(table)
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        yaml
        % {
            "name": name,
            "brokers": kafka_bootstrap,
            "topic": topic,
            "group": group,
            "front": front.url,
            **params,
        }
    )
    pipeline, report, columnar = run_yaml(path)
    assert report.exit_code == 0, report
    assert columnar
    return KafkaColumnarRun(pipeline, client, topic, group)


def deser_count(pipeline: Pipeline, name: str, outcome: str) -> float | None:
    """The deserializer's ``spate_deser_records_total`` for ``outcome`` in pipeline ``name``."""
    labels = {"pipeline": name, "component": "deserializer", "component_type": "deserializer"}
    value: float | None = pipeline.meter.registry.get_sample_value(
        "spate_deser_records_total", labels | {"outcome": outcome}
    )
    return value


def committed_total(kafka_bootstrap: str, run: KafkaColumnarRun) -> int:
    """The offsets the run's group committed, summed over the topic's partitions."""
    return group_committed_total(kafka_bootstrap, run.group, run.topic)
