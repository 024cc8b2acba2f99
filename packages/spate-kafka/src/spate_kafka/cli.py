"""``spate dlq inspect|replay CONFIG``: read a pipeline's Kafka dead-letter topic (B73).

``inspect`` prints every dead-lettered record of the topic named by the configuration's
``dead_letter.sink.kafka`` with its error (the ``spate.error.*`` headers); ``replay``
produces the original key and value of the selected records back into the pipeline's
source topic (or ``--topic``), so a fixed pipeline processes them again. Both read the
topic from its start up to the end offsets seen when the command starts, with their own
consumer (no group offsets are committed), and select records with ``--since`` (the time
they were dead-lettered) and ``--filter name=value`` on the error headers (``reason``,
``stage``, ``source.topic``, ...), and skip what an earlier replay delivered with
``--from PARTITION:OFFSET``.

``replay`` flushes its producer on every exit path — reading that fails midway, a
refused produce, Ctrl-C — and says how far it got: how many records were delivered, and
the ``--from`` positions after the last record of each dead-letter partition that was
delivered with every record before it, so a re-run neither skips nor repeats (B130).

Each client connects with the ``security:`` section (and the connection keys of the
``rdkafka:`` passthrough) of the configuration it talks to: the dead-letter sink's to read,
the Kafka source's to replay into its cluster (the dead-letter sink's without one) (B70).
Brokers that do not answer, or refuse the credentials, fail in one line naming them.

Registered through the ``spate.commands`` entry-point group.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from spate import redact
from spate.config import load_config, parse_duration
from spate.errors import ConfigError, SpateError
from spate.plugins import default_registry

from spate_kafka._logging import LIBRDKAFKA_LOG
from spate_kafka._security import KafkaSecurityConfig
from spate_kafka._sink import KafkaSinkConfig
from spate_kafka.config import KafkaSourceConfig

__all__ = [
    "Connection",
    "DeadLetterRecord",
    "DlqCommand",
    "ReplayError",
    "ReplayProgress",
    "dead_letter_topic",
    "read_dead_letters",
    "replay",
]

HEADER_PREFIX = "spate.error."
_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "client.", "broker.")
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


@dataclass(frozen=True, slots=True)
class Connection:
    """Where a client connects and how: brokers, ``security:`` and the connection keys
    of the ``rdkafka:`` passthrough (TLS, SASL, socket); tuning means nothing here."""

    brokers: str
    security: KafkaSecurityConfig
    rdkafka: dict[str, Any]

    @classmethod
    def of(cls, config: KafkaSinkConfig | KafkaSourceConfig) -> Connection:
        passthrough = {k: v for k, v in config.rdkafka.items() if k.startswith(_PREFIXES)}
        return cls(config.brokers, config.security, passthrough)

    def settings(self, causes: list[str]) -> dict[str, Any]:
        """librdkafka settings; errors that name a cause (TLS, SASL) go to ``causes``."""

        def on_error(error: KafkaError) -> None:
            if error.code() != KafkaError._ALL_BROKERS_DOWN:
                causes.append(error.str())

        settings: dict[str, Any] = dict(self.security.librdkafka())
        settings.update(self.rdkafka)
        settings.update(
            {"bootstrap.servers": self.brokers, "logger": LIBRDKAFKA_LOG, "error_cb": on_error}
        )
        return settings

    def metadata(
        self, client: Consumer | Producer, topic: str, causes: list[str], timeout: float
    ) -> Any:
        """The topic's metadata; a ``SpateError`` naming the brokers when they do not
        answer (with the cause librdkafka reported, such as a refused password)."""
        try:
            metadata = client.list_topics(topic, timeout=timeout)
        except KafkaException as exc:
            client.poll(0.2)  # serves the error callback: why the brokers did not answer
            cause = causes[-1] if causes else exc.args[0]
            raise SpateError(
                f"kafka: brokers {self.brokers} unreachable within {timeout:g}s: {cause}"
            ) from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise SpateError(f"kafka: topic {topic!r} not available on {self.brokers}")
        return found


def read_dead_letters(
    sink: KafkaSinkConfig, *, timeout: float = TIMEOUT, starts: Mapping[int, int] | None = None
) -> Iterator[DeadLetterRecord]:
    """Every record of the dead-letter topic up to the end offsets seen at the start,
    from ``starts[partition]`` (``--from``) where given."""
    connection = Connection.of(sink)
    causes: list[str] = []
    settings = connection.settings(causes)
    settings.update(
        {
            "group.id": f"spate-dlq-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer = Consumer(settings)
    try:
        topic = connection.metadata(consumer, sink.topic, causes, timeout)
        ends: dict[int, int] = {}
        assignment: list[TopicPartition] = []
        for partition in sorted(topic.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(sink.topic, partition), timeout=timeout
            )
            low = max(low, (starts or {}).get(partition, low))
            if high > low:
                ends[partition] = high
                assignment.append(TopicPartition(sink.topic, partition, low))
        if not ends:
            return
        consumer.assign(assignment)
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
            if partition is None or offset is None:  # only error events lack them
                continue
            end = ends.get(partition)
            if end is None or offset >= end:
                continue
            if offset + 1 >= end:
                del ends[partition]
            kind, stamp = msg.timestamp()
            error = {
                name[len(HEADER_PREFIX) :]: _text(data)
                for name, data in _headers(msg)
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


def parse_starts(items: Sequence[str]) -> dict[int, int]:
    """``--from PARTITION:OFFSET`` (repeatable): where reading starts in a partition."""
    starts: dict[int, int] = {}
    for item in items:
        partition, sep, offset = item.partition(":")
        if not sep or not partition.isdigit() or not offset.isdigit():
            raise ConfigError("--from", f"expected PARTITION:OFFSET, got {item!r}")
        starts[int(partition)] = int(offset)
    return starts


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


class ReplayProgress:
    """What a replay delivered, per dead-letter partition, from the delivery reports."""

    def __init__(self, starts: Mapping[int, int] | None = None) -> None:
        """``starts``: the ``--from`` positions this replay began at."""
        self._starts = dict(starts or {})
        self.produced = 0
        self.delivered = 0
        self.failures: list[str] = []
        self._sent: dict[int, list[int]] = {}
        """Dead-letter offsets produced, per partition, in reading order."""
        self._done: set[tuple[int, int]] = set()

    def sent(self, record: DeadLetterRecord) -> Callable[[Any, Any], None]:
        """Note ``record`` as produced; the delivery callback that settles it."""
        self.produced += 1
        self._sent.setdefault(record.partition, []).append(record.offset)
        where = (record.partition, record.offset)

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                self.failures.append(str(err))
            else:
                self.delivered += 1
                self._done.add(where)

        return report

    def resume(self) -> dict[int, int]:
        """Per dead-letter partition, the offset after the last record delivered with
        every record before it: where ``--from`` goes on without a repeat or a gap."""
        points = dict(self._starts)
        for partition, offsets in self._sent.items():
            for offset in offsets:
                if (partition, offset) not in self._done:
                    break
                points[partition] = offset + 1
        return points

    def summary(self, topic: str) -> str:
        text = f"{self.delivered} of {self.produced} record(s) delivered into {topic!r}"
        points = self.resume()
        if not points:
            return text
        options = " ".join(f"--from {p}:{o}" for p, o in sorted(points.items()))
        again = sum(1 for p, o in self._done if o >= points.get(p, 0))
        if not again:
            return f"{text}; to go on without repeating them: {options}"
        return (
            f"{text}; to go on from the first record not delivered: {options} "
            f"({again} record(s) delivered after it are sent again)"
        )


class ReplayError(SpateError):
    """A replay that stopped or lost records, with how far it got (B130)."""

    def __init__(self, message: str, progress: ReplayProgress) -> None:
        super().__init__(message)
        self.progress = progress


def replay(
    records: Iterator[DeadLetterRecord],
    connection: Connection,
    topic: str,
    *,
    delivery_timeout: float = 120.0,
    timeout: float = TIMEOUT,
    starts: Mapping[int, int] | None = None,
) -> int:
    """Produce each record's original key and value to ``topic``; the count written.

    ``starts`` are the ``--from`` positions the records were read from.

    Whatever ends the replay — the records run out, reading them fails, a produce is
    refused, Ctrl-C — the producer is flushed before this returns or raises, so every
    record handed to it is delivered or reported failed; a :class:`ReplayError` says how
    many were delivered and where a re-run goes on (B130).
    """
    causes: list[str] = []
    settings = connection.settings(causes)
    settings.update(
        {
            "enable.idempotence": True,
            "acks": "all",
            "delivery.timeout.ms": int(delivery_timeout * 1000),
        }
    )
    producer = Producer(settings)
    connection.metadata(producer, topic, causes, timeout)
    progress = ReplayProgress(starts)
    stopped: BaseException | None = None
    try:
        for record in records:
            report = progress.sent(record)
            while True:
                try:
                    producer.produce(topic, record.value, record.key, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.1)
    except BaseException as exc:  # flushed and reported below, then raised
        stopped = exc
    left = producer.flush(delivery_timeout + 5)
    if stopped is not None:
        cause = " ".join(str(stopped).split()) or type(stopped).__name__
        raise ReplayError(
            f"kafka: replaying into {topic!r} stopped ({cause}); {progress.summary(topic)}",
            progress,
        ) from stopped
    if progress.failures or left:
        first = f" ({progress.failures[0]})" if progress.failures else ""
        raise ReplayError(
            f"kafka: replaying into {topic!r}: {len(progress.failures) + left} record(s) "
            f"not delivered{first}; {progress.summary(topic)}",
            progress,
        )
    return progress.delivered


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
            "--from",
            dest="starts",
            action="append",
            default=[],
            metavar="PARTITION:OFFSET",
            help="start reading this dead-letter partition at this offset (what a stopped "
            "replay printed); repeatable",
        )
        parser.add_argument(
            "--topic", default=None, help="replay into this topic (default: the source topic)"
        )
        parser.add_argument(
            "--json", action="store_true", help="inspect: one JSON object per record"
        )
        parser.add_argument(
            "--connect-timeout",
            type=float,
            default=TIMEOUT,
            metavar="SECONDS",
            help=f"give up when the brokers do not answer in time (default {TIMEOUT:g})",
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        try:
            sink, source = dead_letter_topic(args.config)
            since = parse_since(args.since) if args.since is not None else None
            filters = parse_filters(args.filter)
            starts = parse_starts(args.starts)
            timeout = args.connect_timeout
            records = select(
                read_dead_letters(sink, timeout=timeout, starts=starts), since, filters
            )
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
            # Into the source's cluster with its security settings (B70).
            connection = Connection.of(source if source is not None else sink)
            written = replay(
                records,
                connection,
                target,
                delivery_timeout=sink.delivery_timeout,
                timeout=timeout,
                starts=starts,
            )
            sys.stdout.write(f"replayed {written} record(s) from {sink.topic} into {target}\n")
            return 0
        except ConfigError as exc:
            sys.stderr.write(f"spate dlq: {exc}\n")
            return 2
        except (SpateError, KafkaException) as exc:
            sys.stderr.write(f"spate dlq: {redact(str(exc))}\n")
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


def _headers(msg: Any) -> list[tuple[str, str | bytes | None]]:
    """A message's headers as ``(name, value)`` pairs (librdkafka gives a list)."""
    headers = msg.headers()
    return list(headers) if headers else []


def _text(data: str | bytes | None) -> str:
    if isinstance(data, str):
        return data
    return bytes(data or b"").decode("utf-8", "replace")
