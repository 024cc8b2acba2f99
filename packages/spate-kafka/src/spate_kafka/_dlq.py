"""``spate dlq inspect|replay CONFIG``: read a pipeline's Kafka dead-letter topic (B73).

``inspect`` prints every dead-lettered record of the topic named by the configuration's
``dead_letter.sink.kafka`` with its error (the ``spate.error.*`` headers); ``replay``
produces the original key and value of the selected records back into the pipeline's
source topic (or ``--topic``), so a fixed pipeline processes them again. Both read the
topic from its start up to the end offsets seen when the command starts, with their own
consumer (no group offsets are committed), and select records with ``--since`` (the time
they were dead-lettered) and ``--filter name=value`` on the error headers (``reason``,
``stage``, ``source.topic``, ...).

Registered through the ``spate.commands`` entry-point group.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from spate.config import load_config, parse_duration
from spate.errors import ConfigError, SpateError
from spate.plugins import default_registry

from spate_kafka._logging import LIBRDKAFKA_LOG
from spate_kafka._sink import KafkaSinkConfig
from spate_kafka.config import KafkaSourceConfig

HEADER_PREFIX = "spate.error."
_CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "client.", "broker.")
TIMEOUT = 30.0
"""Seconds the brokers may take to answer before the command gives up."""


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    """One record of the dead-letter topic."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    error: dict[str, str]
    """The ``spate.error.*`` headers without the prefix (``stage``, ``reason``, ...)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp_ms,
            "key": self.key.decode("utf-8", "replace") if self.key is not None else None,
            "value": self.value.decode("utf-8", "replace"),
            "error": self.error,
        }


def dead_letter_topic(config_path: str) -> tuple[KafkaSinkConfig, KafkaSourceConfig | None]:
    """The Kafka dead-letter sink of a configuration, and its Kafka source if it has one."""
    cfg = load_config(config_path, resolver=default_registry())
    spec = cfg.dead_letter
    if spec is None:
        raise ConfigError("dead_letter", "the configuration has no dead_letter section")
    if spec.tag != "kafka" or not isinstance(spec.config, KafkaSinkConfig):
        raise ConfigError(
            spec.path, f"spate dlq reads a Kafka dead-letter topic; this one is {spec.tag}"
        )
    source = cfg.source.config if isinstance(cfg.source.config, KafkaSourceConfig) else None
    return spec.config, source


def read_dead_letters(
    sink: KafkaSinkConfig, *, timeout: float = TIMEOUT
) -> Iterator[DeadLetterRecord]:
    """Every record of the dead-letter topic up to the end offsets seen at the start."""
    # The connection settings of the sink's passthrough (TLS, SASL); producer tuning
    # (linger, compression, acks) means nothing to a consumer.
    settings: dict[str, Any] = {
        k: v for k, v in sink.rdkafka.items() if k.startswith(_CONNECTION_PREFIXES)
    }
    settings.update(
        {
            "bootstrap.servers": sink.brokers,
            "group.id": f"spate-dlq-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            "logger": LIBRDKAFKA_LOG,
        }
    )
    consumer = Consumer(settings)
    try:
        try:
            metadata = consumer.list_topics(sink.topic, timeout=timeout)
        except KafkaException as exc:
            raise SpateError(f"kafka: brokers {sink.brokers} unreachable: {exc.args[0]}") from None
        topic = metadata.topics.get(sink.topic)
        if topic is None or topic.error is not None:
            raise SpateError(f"kafka: dead-letter topic {sink.topic!r} not available")
        ends: dict[int, int] = {}
        starts: list[TopicPartition] = []
        for partition in sorted(topic.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(sink.topic, partition), timeout=timeout
            )
            if high > low:
                ends[partition] = high
                starts.append(TopicPartition(sink.topic, partition, low))
        if not ends:
            return
        consumer.assign(starts)
        deadline = time.monotonic() + timeout
        while ends:
            msg = consumer.poll(0.5)
            if msg is None:
                if time.monotonic() > deadline:
                    raise SpateError(
                        f"kafka: reading {sink.topic!r} made no progress for {timeout:g}s"
                    )
                continue
            if msg.error() is not None:
                raise SpateError(f"kafka: reading {sink.topic!r}: {msg.error()}")
            deadline = time.monotonic() + timeout
            partition, offset = msg.partition(), msg.offset()
            end = ends.get(partition)
            if end is None or offset >= end:
                continue
            if offset + 1 >= end:
                del ends[partition]
            kind, stamp = msg.timestamp()
            error = {
                name[len(HEADER_PREFIX) :]: bytes(data or b"").decode("utf-8", "replace")
                for name, data in (msg.headers() or [])
                if name.startswith(HEADER_PREFIX)
            }
            yield DeadLetterRecord(
                partition,
                offset,
                0 if kind == TIMESTAMP_NOT_AVAILABLE else stamp,
                msg.key(),
                msg.value() or b"",
                error,
            )
    finally:
        consumer.close()


def parse_since(text: str, now: float | None = None) -> int:
    """``--since``: an ISO time (``2026-05-01T10:00:00Z``) or a duration ago (``2h``),
    as milliseconds since the epoch."""
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        pass
    try:
        seconds = parse_duration(text)
    except (ValueError, TypeError) as exc:
        raise ConfigError("--since", f"expected an ISO time or a duration, got {text!r}") from exc
    now = time.time() if now is None else now
    return int((now - seconds) * 1000)


def parse_filters(items: Sequence[str]) -> dict[str, str]:
    """``--filter name=value`` (repeatable) on the error headers."""
    filters: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError("--filter", f"expected name=value, got {item!r}")
        filters[name.removeprefix(HEADER_PREFIX)] = value
    return filters


def select(
    records: Iterator[DeadLetterRecord], since_ms: int | None, filters: dict[str, str]
) -> Iterator[DeadLetterRecord]:
    for record in records:
        if since_ms is not None and record.timestamp_ms < since_ms:
            continue
        if any(record.error.get(name) != value for name, value in filters.items()):
            continue
        yield record


def replay(records: Iterator[DeadLetterRecord], sink: KafkaSinkConfig, topic: str) -> int:
    """Produce each record's original key and value to ``topic``; the count written."""
    settings = sink.producer_settings()
    producer = Producer(settings)
    failures: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    count = 0
    for record in records:
        while True:
            try:
                producer.produce(topic, record.value, record.key, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    left = producer.flush(sink.delivery_timeout + 5)
    if failures or left:
        raise SpateError(
            f"kafka: replaying into {topic!r}: {len(failures) + left} record(s) not delivered"
            + (f" ({failures[0]})" if failures else "")
        )
    return count


class DlqCommand:
    """``spate dlq inspect|replay CONFIG``."""

    help = "inspect or replay the records of a pipeline's Kafka dead-letter topic"

    @staticmethod
    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("inspect", "replay"), help="what to do")
        parser.add_argument("config", help="pipeline configuration (YAML) with dead_letter")
        parser.add_argument(
            "--since",
            default=None,
            help="only records dead-lettered since an ISO time or a duration ago (2h)",
        )
        parser.add_argument(
            "--filter",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="only records whose error header matches (reason=..., stage=...); repeatable",
        )
        parser.add_argument(
            "--topic", default=None, help="replay into this topic (default: the source topic)"
        )
        parser.add_argument(
            "--json", action="store_true", help="inspect: one JSON object per record"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        try:
            sink, source = dead_letter_topic(args.config)
            since = parse_since(args.since) if args.since is not None else None
            filters = parse_filters(args.filter)
            records = select(read_dead_letters(sink), since, filters)
            if args.action == "inspect":
                shown = 0
                for record in records:
                    sys.stdout.write(_render(record, as_json=args.json) + "\n")
                    shown += 1
                sys.stderr.write(f"{shown} dead-lettered record(s) in {sink.topic}\n")
                return 0
            target = args.topic or (source.topic if source is not None else None)
            if target is None:
                raise ConfigError(
                    "--topic", "the source is not Kafka; name the topic to replay into"
                )
            written = replay(records, sink, target)
            sys.stdout.write(f"replayed {written} record(s) from {sink.topic} into {target}\n")
            return 0
        except ConfigError as exc:
            sys.stderr.write(f"spate dlq: {exc}\n")
            return 2
        except (SpateError, KafkaException) as exc:
            sys.stderr.write(f"spate dlq: {exc}\n")
            return 1


def _render(record: DeadLetterRecord, *, as_json: bool) -> str:
    if as_json:
        return json.dumps(record.as_json(), sort_keys=True)
    err = record.error
    where = f"{err.get('source.topic', '?')}[{err.get('source.partition', '?')}]"
    key = record.key.decode("utf-8", "replace") if record.key is not None else "-"
    value = record.value[:120].decode("utf-8", "replace")
    return (
        f"{record.partition}@{record.offset} {where} offset {err.get('source.offset', '?')} "
        f"stage={err.get('stage', '?')} reason={err.get('reason', '?')} key={key} "
        f"message={err.get('message', '')!r} value={value!r}"
    )
