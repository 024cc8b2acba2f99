"""Entry-point factories of spate-kafka (``spate.sources`` → ``kafka``)."""

from __future__ import annotations

from typing import ClassVar

from spate.plugins import BuildContext

from spate_kafka._source import KafkaSource
from spate_kafka.config import KafkaSourceConfig


class KafkaSourceFactory:
    """Builds a :class:`KafkaSource` from ``source: {kafka: ...}``."""

    config_model: ClassVar[type[KafkaSourceConfig]] = KafkaSourceConfig

    @staticmethod
    def build(config: KafkaSourceConfig, context: BuildContext) -> KafkaSource:
        return KafkaSource(config, meter=context.meter, component=context.component)
