"""librdkafka's own log lines, routed into :mod:`logging` at DEBUG.

librdkafka logs every failed connection attempt (several per second while a broker is
down); spate reports the same conditions once through the client's error callback and a
start-up error naming the brokers (B29). Its lines stay available at DEBUG on the
``spate_kafka.librdkafka`` logger instead of being printed to stderr.
"""

from __future__ import annotations

import logging

_logger = logging.getLogger("spate_kafka.librdkafka")


class LibrdkafkaLog:
    """Handed to confluent-kafka as its ``logger``: every line at DEBUG."""

    def log(self, level: int, msg: str, *args: object) -> None:
        if _logger.isEnabledFor(logging.DEBUG):
            _logger.debug(msg, *args)


LIBRDKAFKA_LOG = LibrdkafkaLog()
