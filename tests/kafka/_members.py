"""Group members run in the test's own process: a Kafka source → a held capture sink.

A :class:`Member` is one pipeline of a consumer group on a thread, its sink scripted so
a test can hold it full (every write retried, the source paused by backpressure, B7) and
release it while members join, leave or die. ``spool`` puts a spool tier (``ack:
terminal``) in front of the capture sink, so the spool holds the batches the held sink
has not taken (or, with ``ack="spooled"``, has custody of). ``rebalance`` picks the
group protocol (B175, B176); under ``consumer`` the broker owns the session, so the
group's own session is set instead of the client's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer
from spate import ExitReport, Pipeline, SystemClock
from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.metrics import Meter
from spate.sink import JsonlStore, SpoolConfig, SpoolTier
from spate.testing import RETRYABLE, CaptureScript, CopyToSinkProcessor, capture_sink
from spate_kafka import KafkaSource, KafkaSourceConfig

from tests.support.delivery import wait_until
from tests.support.kafka_groups import set_consumer_session
from tests.support.services import unique_name

GROUP_SETTINGS = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "topic.metadata.refresh.interval.ms": 2000,
}


def group_settings(bootstrap: str, group: str, rebalance: str) -> dict[str, object]:
    """The client settings of a member of ``group``; under ``consumer`` the session is
    the group's (set on the broker here), which the client may not set."""
    if rebalance != "consumer":
        return dict(GROUP_SETTINGS)
    set_consumer_session(bootstrap, group, 6000)
    return {"topic.metadata.refresh.interval.ms": 2000}


@dataclass
class Member:
    """One pipeline of the group running on a thread, with its held sink's script."""

    topic: str
    pipeline: Pipeline
    source: KafkaSource
    script: CaptureScript
    thread: threading.Thread
    reports: list[ExitReport]

    def delivered(self) -> set[bytes]:
        return {row for row in self.script.rows if isinstance(row, bytes)}

    def metric(self, name: str, **labels: str) -> float:
        value = self.pipeline.meter.registry.get_sample_value(
            name, {"pipeline": self.pipeline.name, **labels}
        )
        return 0.0 if value is None else value

    def polled(self, partition: int) -> float:
        """Records polled from ``partition`` so far (the runtime's per-lane counter)."""
        return self.metric(
            "spate_source_records_total",
            component="source",
            component_type="source",
            lane=f"{self.topic}[{partition}]",
        )

    def held(self) -> bool:
        """The sink refused a row: the runtime pauses every owned lane (B7)."""
        return (
            self.metric(
                "spate_backpressure_paused", component="backpressure", component_type="flow"
            )
            == 1
        )

    def stop(self, timeout: float = 120) -> ExitReport:
        self.pipeline.request_stop("test done")
        return self.join(timeout)

    def join(self, timeout: float = 120) -> ExitReport:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "pipeline did not stop"
        return self.reports[0]


def start_member(
    bootstrap: str,
    topic: str,
    group: str,
    *,
    bounded: bool = False,
    held: bool = True,
    consume_batch: int = 100,
    client_id: str = "spate",
    rebalance: str = "eager",
    spool: Path | None = None,
    ack: str = "terminal",
) -> Member:
    """A pipeline of ``group`` whose sink refuses rows (``held``) until the script says ok;
    with ``spool`` (a directory) a spool tier (acknowledging at ``ack``) sits in front of
    it."""
    source = KafkaSource(
        KafkaSourceConfig(
            brokers=bootstrap,
            topic=topic,
            group_id=group,
            commit_interval=0.2,
            statistics_interval=1.0,
            stop_at="end" if bounded else "never",
            consume_batch=consume_batch,
            rebalance=rebalance,  # type: ignore[arg-type]
            rdkafka={**group_settings(bootstrap, group, rebalance), "client.id": client_id},
        )
    )
    backpressure = BackpressureConfig()
    budget = Pipeline.new_budget(backpressure)
    name = unique_name("member")
    sink, script = capture_sink("held", max_rows=20, capacity=40, budget=budget, threaded=True)
    if held:
        script.always(RETRYABLE)
    meter = Meter(name)
    if spool is not None:
        config = SpoolConfig(dir=str(spool), ack=ack, max_records=50)  # type: ignore[arg-type]
        store = JsonlStore(str(spool), segment_bytes=config.segment_bytes)
        sink = SpoolTier(  # type: ignore[assignment]
            "spool", config, sink, store, meter=meter, clock=SystemClock(), pipeline=name
        )
    pipeline = Pipeline(
        name,
        source,
        {"held": sink},
        processor=lambda sinks: CopyToSinkProcessor(sinks["held"]),
        checkpoint=CheckpointConfig(interval=0.2, drain_timeout=3.0, stalled_fail_after=600),
        backpressure=backpressure,
        budget=budget,
        meter=meter,
        handle_signals=False,
    )
    reports: list[ExitReport] = []
    thread = threading.Thread(target=lambda: reports.append(pipeline.run()), daemon=True)
    thread.start()
    return Member(topic, pipeline, source, script, thread, reports)


@contextmanager
def plain_member(bootstrap: str, topic: str, group: str) -> Iterator[Consumer]:
    """A second member of ``group`` that never commits; it leaves the group on exit."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **GROUP_SETTINGS,
        }
    )
    assigned: list[int] = []
    stop = threading.Event()

    def on_assign(_consumer: Consumer, partitions: list[object]) -> None:
        assigned.append(len(partitions))

    consumer.subscribe([topic], on_assign=on_assign)

    def serve() -> None:
        while not stop.is_set():
            consumer.poll(0.1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        wait_until(lambda: any(assigned), 120, "the second member to get partitions")
        yield consumer
    finally:
        stop.set()
        thread.join(30)
        consumer.close()
