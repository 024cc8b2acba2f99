"""The ``rdkafka:`` passthrough maps and the keys spate owns in them (B19).

Users may pass any librdkafka setting through ``rdkafka:`` — TLS, SASL, fetch tuning —
except the settings the framework must control for its delivery guarantees. Those are
refused at start-up with their dotted path, including librdkafka's aliases for them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

# Settings the source owns: offsets are stored and committed only behind delivered data,
# group membership and endpoints come from first-class keys, statistics feed lag metrics.
CONSUMER_OWNED: Mapping[str, str] = {
    "enable.auto.commit": "offsets are committed by spate behind delivered data",
    "auto.commit.enable": "offsets are committed by spate behind delivered data",
    "enable.auto.offset.store": "offsets are stored by spate behind delivered data",
    "auto.commit.interval.ms": "use commit_interval",
    "enable.partition.eof": "spate reads end offsets itself (stop_at)",
    "bootstrap.servers": "use brokers",
    "metadata.broker.list": "use brokers",
    "group.id": "use group_id",
    "statistics.interval.ms": "use statistics_interval",
    "group.protocol": "use rebalance: consumer",
    "group.remote.assignor": "use group_assignor",
    "group.instance.id": "use instance_id",
}

# Settings the sink owns: idempotence and acknowledgements are what make a write durable.
PRODUCER_OWNED: Mapping[str, str] = {
    "bootstrap.servers": "use brokers",
    "metadata.broker.list": "use brokers",
    "enable.idempotence": "the sink always runs an idempotent producer",
    "acks": "the sink always waits for acks=all",
    "request.required.acks": "the sink always waits for acks=all",
    "transactional.id": "the sink does not use transactions",
    "compression.type": "use compression",
    "compression.codec": "use compression",
    "message.max.bytes": "use max_message_bytes",
    "delivery.timeout.ms": "use delivery_timeout",
    "message.timeout.ms": "use delivery_timeout",
    "statistics.interval.ms": "spate owns statistics",
}

_COOPERATIVE = "cooperative-sticky"


def passthrough_errors(
    settings: Mapping[str, object], owned: Mapping[str, str]
) -> Iterator[tuple[str, str]]:
    """Yield ``(key, message)`` for every refused passthrough key (B19)."""
    for key, value in settings.items():
        if key in owned:
            yield key, f"is owned by spate ({owned[key]})"
        elif key.endswith("_cb") or key in ("on_commit", "on_delivery", "logger"):
            yield key, "callbacks cannot be set from configuration"
        elif key == "partition.assignment.strategy" and _COOPERATIVE in str(value):
            yield (
                key,
                (
                    "use rebalance: cooperative (spate then drains and commits only the "
                    "partitions that move)"
                ),
            )


_PROPERTY = re.compile(r'configuration property:? "([^"]+)"')


def librdkafka_errors(
    settings: Mapping[str, object], passthrough: Mapping[str, object], *, producer: bool
) -> Iterator[tuple[str, str]]:
    """Yield ``(key, message)`` when librdkafka refuses ``settings`` (B44).

    librdkafka checks every property (name, value, combinations) when a client is
    created; without ``bootstrap.servers`` the client connects to nothing, so this runs
    at ``spate validate`` and costs a few milliseconds. A refused property is reported
    at its own key (``rdkafka.<key>``) when it is one of the ``passthrough`` keys, else
    at ``rdkafka``.
    """
    from confluent_kafka import Consumer, KafkaException, Producer

    from spate_kafka._logging import LIBRDKAFKA_LOG

    probe: dict[str, object] = {
        k: v for k, v in settings.items() if k not in ("bootstrap.servers", "metadata.broker.list")
    }
    probe["logger"] = LIBRDKAFKA_LOG
    try:
        client = Producer(probe) if producer else Consumer(probe)
    except KafkaException as exc:
        error = exc.args[0]
        text = error.str() if hasattr(error, "str") else str(error)
        match = _PROPERTY.search(text)
        key = match.group(1) if match else ""
        yield (f"rdkafka.{key}" if key in passthrough else "rdkafka"), f"librdkafka: {text}"
        return
    if isinstance(client, Producer):
        client.flush(0)
    else:
        client.close()
