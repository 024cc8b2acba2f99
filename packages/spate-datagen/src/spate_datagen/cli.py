"""``spate datagen``: produce storefront or wide events into a Kafka topic.

Registered through the ``spate.commands`` entry-point group. Needs confluent-kafka
(installed with ``spate[kafka]``); without it the command says what to install.
Prints the events produced per kind and, with ``--manifest``, writes them as JSON so a
later check can compare a destination with what was produced.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from spate import redact
from spate.plugins import install_hint

from spate_datagen._codec import FORMATS, Format, encoder
from spate_datagen._events import Manifest
from spate_datagen._wide import EventSet, events_of

__all__ = ["CONNECT_TIMEOUT", "DatagenCommand", "ensure_topic", "produce_events"]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
"""Seconds to wait for the brokers to answer a metadata request before giving up."""


class _LibrdkafkaLog:
    """librdkafka's log lines (one per failed connection attempt) at DEBUG, not stderr."""

    _log = logging.getLogger("spate_datagen.librdkafka")

    def log(self, level: int, msg: str, *args: object) -> None:
        self._log.debug(msg, *args)


def produce_events(
    brokers: str | None,
    topic: str,
    count: int,
    *,
    seed: int = 1,
    fmt: Format = "avro",
    events: EventSet = "storefront",
    schema_id: int = 1,
    partitions: int | None = None,
    producer_settings: dict[str, Any] | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> Manifest:
    """Produce ``count`` events to ``topic`` and wait for every delivery report.

    Raises ``RuntimeError`` naming the brokers when they do not answer within
    ``connect_timeout`` seconds or a delivery fails. ``brokers=None``
    with ``producer_settings`` containing ``test.mock.num.brokers`` uses librdkafka's
    mock cluster (the caller keeps the producer's process alive).
    """
    from confluent_kafka import KafkaError, KafkaException, Producer

    settings: dict[str, Any] = {
        "linger.ms": 20,
        "batch.num.messages": 10_000,
        "enable.idempotence": True,
        "compression.type": "lz4",
        "logger": _LibrdkafkaLog(),
    }
    if brokers is not None:
        settings["bootstrap.servers"] = brokers
    settings.update(producer_settings or {})
    causes: list[str] = []

    def on_error(error: KafkaError) -> None:
        # A TLS or SASL failure names its cause; "brokers are down" does not (B70).
        if error.code() != KafkaError._ALL_BROKERS_DOWN:
            causes.append(error.str())

    settings["error_cb"] = on_error
    producer = Producer(settings)
    try:
        producer.list_topics(timeout=connect_timeout)
    except KafkaException as exc:
        producer.poll(0.2)  # serves the error callback
        raise RuntimeError(
            f"brokers {brokers or 'of the mock cluster'} unreachable within "
            f"{connect_timeout:g}s: {causes[-1] if causes else exc.args[0]}"
        ) from None
    if partitions is not None and brokers is not None:
        ensure_topic(brokers, topic, partitions, settings=producer_settings)
    encode = encoder(fmt, schema_id=schema_id)
    manifest = Manifest() if events == "storefront" else Manifest(counts={}, order_ids={})
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err.str())

    for event in events_of(events, count, seed=seed):
        while True:
            try:
                producer.produce(topic, encode(event), event.key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        manifest.add(event)
        producer.poll(0)
    remaining = producer.flush(120)
    if remaining or failures:
        detail = failures[0] if failures else f"{remaining} messages not acknowledged"
        raise RuntimeError(f"producing to {topic!r} on {brokers or 'the mock cluster'}: {detail}")
    return manifest


def ensure_topic(
    brokers: str,
    topic: str,
    partitions: int,
    timeout: float = 30.0,
    settings: dict[str, Any] | None = None,
) -> None:
    """Create ``topic`` with ``partitions`` partitions unless it exists (``settings``:
    the client's security settings, as the producer's)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    config: dict[str, Any] = {
        **(settings or {}),
        "bootstrap.servers": brokers,
        "logger": _LibrdkafkaLog(),
    }
    admin = AdminClient(config)
    metadata = admin.list_topics(timeout=timeout)
    if topic in metadata.topics and not metadata.topics[topic].error:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions)])
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        error = exc.args[0]
        if not (isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is not None and not meta.error and len(meta.partitions) == partitions:
            return
        time.sleep(0.1)


def _security_settings(path: Path | None) -> dict[str, Any]:
    """librdkafka settings of a ``--security`` file (B70); none without one."""
    if path is None:
        return {}
    from spate.config import load_section
    from spate_kafka import KafkaSecurityConfig

    return dict(load_section(path, KafkaSecurityConfig, "security").librdkafka())


class DatagenCommand:
    """``spate datagen --brokers HOST:PORT --topic NAME --count N``."""

    help = "produce synthetic storefront or wide events into a Kafka topic"

    @staticmethod
    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--brokers", required=True, help="Kafka bootstrap servers")
        parser.add_argument("--topic", required=True, help="topic to produce to")
        parser.add_argument("--count", type=int, default=100_000, help="events to produce")
        parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
        parser.add_argument("--format", choices=FORMATS, default="avro", help="payload encoding")
        parser.add_argument(
            "--events",
            choices=("storefront", "wide"),
            default="storefront",
            help="storefront events (about 100 bytes) or wide events (about 1.6 KB)",
        )
        parser.add_argument(
            "--schema-id",
            type=int,
            default=1,
            help="schema id of --format confluent frames (default 1)",
        )
        parser.add_argument(
            "--partitions", type=int, default=None, help="create the topic with N partitions"
        )
        parser.add_argument(
            "--manifest", type=Path, default=None, help="write counts per kind as JSON here"
        )
        parser.add_argument(
            "--security",
            type=Path,
            default=None,
            metavar="FILE",
            help="YAML file with the Kafka security section (protocol, ca, cert, key, sasl), "
            "as under source.kafka.security",
        )
        parser.add_argument(
            "--connect-timeout",
            type=float,
            default=CONNECT_TIMEOUT,
            metavar="SECONDS",
            help=f"give up when the brokers do not answer in time (default {CONNECT_TIMEOUT:g})",
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            hint = install_hint("spate-kafka", "kafka")
            sys.stderr.write(f"spate datagen produces to Kafka and needs confluent-kafka: {hint}\n")
            return 2
        try:
            manifest = produce_events(
                args.brokers,
                args.topic,
                args.count,
                seed=args.seed,
                fmt=args.format,
                events=args.events,
                schema_id=args.schema_id,
                partitions=args.partitions,
                producer_settings=_security_settings(args.security),
                connect_timeout=args.connect_timeout,
            )
        except Exception as exc:  # the command's top level: one clear line, no traceback
            sys.stderr.write(f"spate datagen: {redact(str(exc))}\n")
            return 1
        summary = {"topic": args.topic, "total": manifest.total, "counts": manifest.counts}
        if args.manifest is not None:
            args.manifest.write_text(json.dumps(summary, indent=2) + "\n")
        sys.stdout.write(
            f"produced {manifest.total} events to {args.topic}: "
            + ", ".join(f"{k}={v}" for k, v in manifest.counts.items())
            + "\n"
        )
        return 0
