"""The Kafka sink: an idempotent producer with ``acks=all`` behind the shared sink pool.

The pool does batching, retries, the breaker and acks (docs/concepts/sinks.md); this module only
turns rows into messages and writes a sealed batch: every message of the batch is
produced, and the batch counts as written once *every* delivery report succeeded. A
failed report fails the attempt; the pool retries the whole batch (B9, B12), so a retry
may duplicate messages whose reports had succeeded — at-least-once, never less.

Rows are ``bytes`` / ``str`` (the message value, no key), a ``(key, value)`` pair whose
parts are ``bytes``, ``str`` or ``None``, or a ``(key, value, headers)`` triple whose
headers are ``(name, bytes)`` pairs (a dead letter's error, B71). A message larger than
``max_message_bytes`` is a record error, found when the row is appended (B28).

On the columnar path the sink takes frames (a :class:`~spate.sink.FrameSink`, B172): a
frame's ``value`` column (bytes or text) is each message's value and its optional
``key`` column (bytes, text or null) its key; any other column fails the run at the
first frame, naming the columns. Each row is checked as the row path checks a
``(key, value)`` pair, so a null value or a message over ``max_message_bytes`` is a
record error for that row alone (B28), and the messages are produced one by one as on
the row path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException, Producer
from spate.config import ByteSize, Duration
from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.plugins import BuildContext
from spate.records import ROW_COLUMN
from spate.sink import (
    BatchConfig,
    BreakerConfig,
    InflightConfig,
    PoolConfig,
    RetryConfig,
    RowBuffer,
    ShardConfig,
    SinkPool,
    WriteBatch,
)

from spate_kafka._logging import LIBRDKAFKA_LOG
from spate_kafka._passthrough import PRODUCER_OWNED, librdkafka_errors, passthrough_errors
from spate_kafka._security import KafkaSecurityConfig

logger = logging.getLogger(__name__)


Headers = list[tuple[str, bytes]]
Message = tuple[bytes | None, bytes, Headers | None]

# Delivery errors retrying cannot fix: the pool fails the batch at once.
_PERMANENT = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError._INVALID_ARG,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSinkConfig:
    """``sink: {kafka: ...}``."""

    brokers: str
    """Bootstrap servers, ``host:port[,host:port...]``."""
    topic: str
    """Topic every row is written to."""
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "lz4"
    """Producer compression codec."""
    delivery_timeout: Duration = 120.0
    """How long librdkafka may try to deliver one message before reporting it failed."""
    max_message_bytes: ByteSize = 1_000_000
    """Largest key + value accepted; a larger row is a record error (policy)."""
    batch: BatchConfig = field(default_factory=BatchConfig)
    inflight: InflightConfig = field(default_factory=InflightConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    on_record_error: ErrorPolicy = ErrorPolicy.FAIL
    """A row that cannot be written (too large, wrong type): ``fail``, ``skip`` (counted)
    or ``dead_letter``."""
    security: KafkaSecurityConfig = field(default_factory=KafkaSecurityConfig)
    """TLS and SASL: ``protocol``, ``ca``, ``cert``, ``key``, ``sasl`` (B70)."""
    rdkafka: dict[str, str | int | float | bool] = field(default_factory=dict)
    """Other librdkafka producer settings (TLS, SASL, linger), passed through."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.brokers.strip():
            yield "brokers", "must name at least one host:port"
        if not self.topic.strip():
            yield "topic", "must not be empty"
        if self.delivery_timeout <= 0:
            yield "delivery_timeout", "must be positive"
        if self.max_message_bytes < 1:
            yield "max_message_bytes", "must be positive"
        refused = False
        for key, message in passthrough_errors(self.rdkafka, PRODUCER_OWNED):
            refused = True
            yield f"rdkafka.{key}", message
        for key, message in self.security.conflicts(self.rdkafka):
            refused = True
            yield f"rdkafka.{key}", message
        if (self.rdkafka or self.security.protocol != "PLAINTEXT") and not refused:
            yield from librdkafka_errors(self.producer_settings(), self.rdkafka, producer=True)

    def producer_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "logger": LIBRDKAFKA_LOG,
        }
        settings.update(self.security.librdkafka())
        settings.update(self.rdkafka)
        settings.update(
            {
                "bootstrap.servers": self.brokers,
                "enable.idempotence": True,
                "acks": "all",
                "compression.type": self.compression,
                "message.max.bytes": max(self.max_message_bytes + 1024, 1_000_000),
                "delivery.timeout.ms": int(self.delivery_timeout * 1000),
            }
        )
        return settings

    def pool_config(self) -> PoolConfig:
        """The sink pool's settings (batching, in-flight writes, retries, breaker)."""
        return PoolConfig.of(self)


def _as_bytes(part: object, what: str) -> bytes | None:
    if part is None:
        return None
    if isinstance(part, bytes):
        return part
    if isinstance(part, str):
        return part.encode()
    if isinstance(part, (bytearray, memoryview)):
        return bytes(part)
    raise SinkError(
        f"message {what} must be bytes or str, got {type(part).__name__}", ErrorClass.RECORD
    )


def _message(row: object, limit: int) -> tuple[Message, int]:
    """The message of a row and its size in bytes; ``SinkError(RECORD)`` when the row
    cannot be one (B28)."""
    headers: Headers | None = None
    if isinstance(row, tuple):
        if len(row) == 3 and isinstance(row[2], list):
            headers = row[2]
        elif len(row) != 2:
            raise SinkError(
                "a Kafka row is a value, a (key, value) pair or a (key, value, headers) triple",
                ErrorClass.RECORD,
            )
        key, value = _as_bytes(row[0], "key"), _as_bytes(row[1], "value")
    else:
        key, value = None, _as_bytes(row, "value")
    if value is None:
        raise SinkError("a Kafka row needs a value", ErrorClass.RECORD)
    size = len(value) + (len(key) if key is not None else 0)
    if headers:
        size += sum(len(name) + len(data) for name, data in headers)
    if size > limit:
        raise SinkError(
            f"message of {size} bytes exceeds max_message_bytes ({limit})",
            ErrorClass.RECORD,
        )
    return (key, value, headers), 120 + size


@dataclass(frozen=True, slots=True)
class _FrameMessages:
    """A frame's messages, checked (what ``prepare_frame`` returns)."""

    messages: list[Message]
    sizes: list[int]

    def __len__(self) -> int:
        return len(self.messages)


class MessageBuffer:
    """The messages of one batch, checked as they are appended."""

    __slots__ = ("_limit", "messages")

    def __init__(self, limit: int) -> None:
        self.messages: list[Message] = []
        self._limit = limit

    def append(self, row: object) -> int:
        message, size = _message(row, self._limit)
        self.messages.append(message)
        return size

    def append_frame(self, frame: object) -> int:
        """Add a prepared frame's messages (:class:`~spate.sink.FrameBuffer`)."""
        if not isinstance(frame, _FrameMessages):
            raise SinkError("a Kafka buffer takes what prepare_frame returned", ErrorClass.FATAL)
        self.messages.extend(frame.messages)
        return sum(frame.sizes)

    def __len__(self) -> int:
        return len(self.messages)


class _Delivery:
    """Delivery reports of one write attempt."""

    __slots__ = ("error", "lock", "pending")

    def __init__(self, pending: int) -> None:
        self.pending = pending
        self.error: KafkaError | None = None
        self.lock = threading.Lock()

    def report(self, err: KafkaError | None, _msg: object) -> None:
        with self.lock:
            self.pending -= 1
            if err is not None and self.error is None:
                self.error = err


class KafkaShardWriter:
    """Writes sealed batches with one idempotent producer."""

    def __init__(self, config: KafkaSinkConfig, endpoint: str) -> None:
        self.endpoint = endpoint
        self._config = config
        self._topic = config.topic
        self._producer = Producer(config.producer_settings())

    def probe(self) -> None:
        try:
            metadata = self._producer.list_topics(self._topic, timeout=30)
        except KafkaException as exc:
            raise SinkError(
                f"kafka: brokers {self.endpoint} unreachable: {exc.args[0]}", ErrorClass.FATAL
            ) from exc
        topic = metadata.topics.get(self._topic)
        if topic is None or topic.error is not None:
            reason = topic.error if topic is not None else "not found"
            raise SinkError(
                f"kafka: topic {self._topic!r} not available on {self.endpoint}: {reason}",
                ErrorClass.FATAL,
            )

    def write(self, batch: WriteBatch) -> None:
        buffer = batch.buffer
        if not isinstance(buffer, MessageBuffer):
            raise SinkError("kafka sink got a foreign buffer", ErrorClass.FATAL)
        producer = self._producer
        delivery = _Delivery(len(buffer.messages))
        report = delivery.report
        topic = self._topic
        for key, value, headers in buffer.messages:
            while True:
                try:
                    if headers is None:
                        producer.produce(topic, value, key, on_delivery=report)
                    else:
                        producer.produce(
                            topic, value, key, headers=_wire(headers), on_delivery=report
                        )
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:
                    raise _classify(exc.args[0], self.endpoint) from exc
        deadline = time.monotonic() + self._config.delivery_timeout + 5
        while True:
            with delivery.lock:
                pending = delivery.pending
            if pending <= 0 or time.monotonic() >= deadline:
                break
            producer.poll(0.05)
        if delivery.error is not None:
            raise _classify(delivery.error, self.endpoint)
        if delivery.pending > 0:
            raise SinkError(
                f"kafka: {delivery.pending} deliveries to {topic!r} not reported in time",
                ErrorClass.RETRYABLE,
            )

    def close(self) -> None:
        self._producer.flush(5)


def _classify(error: object, endpoint: str) -> SinkError:
    if isinstance(error, KafkaError):
        permanent = error.fatal() or error.code() in _PERMANENT
        cls = ErrorClass.FATAL if permanent else ErrorClass.RETRYABLE
        return SinkError(f"kafka ({endpoint}): {error.str()}", cls)
    return SinkError(f"kafka ({endpoint}): {error}", ErrorClass.RETRYABLE)


class KafkaSinkConnector:
    """The pool's connector: message buffers and one producer per endpoint; a
    :class:`~spate.sink.FrameConnector` (frames of ``key`` and ``value`` columns, B172)."""

    takes_frames = True

    def __init__(self, config: KafkaSinkConfig) -> None:
        self._config = config

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """The messages of a frame's ``key`` and ``value`` columns, and the rows that
        cannot be messages as ``(position, reason)`` (B28, B172)."""
        import polars as pl

        if not isinstance(frame, pl.DataFrame):
            raise SinkError(
                f"the Kafka sink takes polars frames, got {type(frame).__name__}", ErrorClass.FATAL
            )
        names = [c for c in frame.columns if c != ROW_COLUMN]
        if "value" not in names or set(names) - {"key", "value"}:
            raise SinkError(
                "a frame for the Kafka sink has a value column and optionally a key column, "
                f"got {names}",
                ErrorClass.FATAL,
            )
        values = frame.get_column("value").to_list()
        keys = frame.get_column("key").to_list() if "key" in names else [None] * len(values)
        limit = self._config.max_message_bytes
        messages: list[Message] = []
        sizes: list[int] = []
        bad: list[tuple[int, str]] = []
        for position, row in enumerate(zip(keys, values, strict=True)):
            try:
                message, size = _message(row, limit)
            except SinkError as exc:
                bad.append((position, str(exc)))
                continue
            messages.append(message)
            sizes.append(size)
        return _FrameMessages(messages, sizes), bad

    def take_rows(self, frame: object, rows: list[int]) -> object:
        """The prepared messages at ``rows``, in that order."""
        if not isinstance(frame, _FrameMessages):
            raise SinkError("take_rows takes what prepare_frame returned", ErrorClass.FATAL)
        return _FrameMessages([frame.messages[i] for i in rows], [frame.sizes[i] for i in rows])

    def new_buffer(self, shard: int) -> RowBuffer:
        return MessageBuffer(self._config.max_message_bytes)

    def open_writer(self, shard: int, replica: int, endpoint: str) -> KafkaShardWriter:
        return KafkaShardWriter(self._config, endpoint)


def build_kafka_sink(config: KafkaSinkConfig, context: BuildContext) -> SinkPool:
    """A pooled Kafka sink: one shard whose one endpoint is the cluster."""
    return SinkPool.from_context(
        KafkaSinkConnector(config),
        context,
        shards=[ShardConfig(replicas=(config.brokers,))],
        config=config.pool_config(),
        component_type="kafka",
    )


def _wire(headers: Headers) -> list[tuple[str, str | bytes | None]]:
    """Headers as the producer's signature spells them (its list is invariant)."""
    return list[tuple[str, str | bytes | None]](headers)
