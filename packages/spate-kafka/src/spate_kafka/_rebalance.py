"""The group protocol of the Kafka source: what a rebalance moves and what it requires.

=============  ==========================================  =================================
``rebalance``  what moves on a rebalance                   requires
=============  ==========================================  =================================
eager          every partition of every member             any broker, any librdkafka
cooperative    only the partitions that change owner       librdkafka 1.6+ (KIP-429)
consumer       only the partitions that change owner,      Kafka 4.0+ with the consumer
               assigned by the broker                      group protocol on, librdkafka
                                                           2.12+ (KIP-848)
=============  ==========================================  =================================

Under ``cooperative`` and ``consumer`` librdkafka reports an incremental rebalance: the
assign callback receives only the partitions added and the revoke callback only those
taken away; the source drains, flushes and commits just those lanes while the others
keep fetching (B175). :func:`check_support` refuses at start, in one line naming
``source.kafka.rebalance``, what the client or the broker cannot do (B176).

Static membership (``instance_id`` → ``group.instance.id``) gives a restarted member its
partitions back without a rebalance; under ``--processes N`` each worker's id carries
its index (:func:`worker_instance_id`, B178).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Literal

from spate.errors import ErrorClass, SourceError

logger = logging.getLogger(__name__)

RebalanceProtocol = Literal["eager", "cooperative", "consumer"]

WORKER_INDEX_ENV = "SPATE_WORKER_INDEX"
"""Set by ``spate run --processes N`` in each worker's environment (0, 1, ...)."""

CLIENT_MINIMUM: Mapping[str, tuple[int, int, int]] = {
    "eager": (0, 0, 0),
    "cooperative": (1, 6, 0),
    "consumer": (2, 12, 0),
}
"""The oldest librdkafka each protocol runs on (cooperative-sticky came in 1.6; the
consumer protocol is generally available since 2.12)."""

_BROKER_PROTOCOLS = "group.coordinator.rebalance.protocols"
"""The broker setting that lists the group protocols it serves (Kafka 3.7+)."""


def protocol_settings(
    protocol: RebalanceProtocol, assignor: Literal["uniform", "range"] | None
) -> dict[str, str]:
    """The librdkafka settings of ``protocol``."""
    if protocol == "cooperative":
        return {"partition.assignment.strategy": "cooperative-sticky"}
    if protocol == "consumer":
        settings = {"group.protocol": "consumer"}
        if assignor is not None:
            settings["group.remote.assignor"] = assignor
        return settings
    return {}


def worker_instance_id(instance_id: str, environ: Mapping[str, str] | None = None) -> str:
    """``instance_id``, suffixed ``-<index>`` in a worker of ``--processes N`` (B178):
    every member of a group needs its own ``group.instance.id``."""
    env = os.environ if environ is None else environ
    index = env.get(WORKER_INDEX_ENV, "")
    return f"{instance_id}-{index}" if index.isdigit() else instance_id


def _version(text: str) -> tuple[int, int, int]:
    parts = [int(p) if p.isdigit() else 0 for p in text.split("-")[0].split(".")[:3]]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def client_error(protocol: RebalanceProtocol, libversion: str) -> str | None:
    """Why this librdkafka cannot run ``protocol``, or None."""
    need = CLIENT_MINIMUM[protocol]
    if _version(libversion) >= need:
        return None
    return (
        f"source.kafka.rebalance: {protocol} needs librdkafka "
        f"{'.'.join(map(str, need))} or newer; this client has {libversion}"
    )


def broker_error(protocol: RebalanceProtocol, broker_protocols: str | None) -> str | None:
    """Why a broker whose ``group.coordinator.rebalance.protocols`` is
    ``broker_protocols`` (None: the broker does not know the setting) cannot run
    ``protocol``, or None."""
    if protocol != "consumer":
        return None
    served = {p.strip().lower() for p in (broker_protocols or "").split(",")}
    if "consumer" in served:
        return None
    found = (
        f"the broker serves {broker_protocols}"
        if broker_protocols is not None
        else "the broker predates the consumer group protocol"
    )
    return (
        "source.kafka.rebalance: consumer needs a broker serving the consumer group "
        f"protocol (Kafka 4.0+, {_BROKER_PROTOCOLS} with consumer); {found}"
    )


def check_support(
    protocol: RebalanceProtocol, brokers: str, settings: Mapping[str, str | int | float | bool]
) -> None:
    """Raise a FATAL :class:`SourceError` when the client or the broker at ``brokers``
    cannot run ``protocol`` (B176). ``settings`` connect the admin client (TLS, SASL).

    The broker is asked for its ``group.coordinator.rebalance.protocols``; a broker that
    refuses to describe its configuration (no ``DescribeConfigs`` right) is given the
    benefit of the doubt: librdkafka then reports the refusal when the group is joined.
    """
    from confluent_kafka import KafkaException, libversion
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    from spate_kafka._logging import LIBRDKAFKA_LOG

    reason = client_error(protocol, libversion()[0])
    if reason is None and protocol == "consumer":
        admin_settings: dict[str, Any] = {
            k: v
            for k, v in settings.items()
            if k.startswith(("security.", "ssl.", "sasl.", "client.", "socket."))
        }
        admin_settings["bootstrap.servers"] = brokers
        admin_settings["logger"] = LIBRDKAFKA_LOG  # its log lines through logging
        admin = AdminClient(admin_settings)
        try:
            metadata = admin.list_topics(timeout=10)
            broker = next(iter(metadata.brokers))
            resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
            configs = admin.describe_configs([resource])[resource].result(timeout=10)
        except (KafkaException, StopIteration) as exc:
            logger.warning(
                "kafka: could not read the broker's group protocols (%s); joining anyway", exc
            )
            return
        entry = configs.get(_BROKER_PROTOCOLS)
        reason = broker_error(protocol, entry.value if entry is not None else None)
    if reason is not None:
        raise SourceError(reason, ErrorClass.FATAL)
