"""Entry-point factories of spate-kafka (``spate.sources`` → ``kafka``)."""

from __future__ import annotations

from typing import ClassVar

from spate.plugins import BuildContext
from spate.sink import SinkPool

from spate_kafka._sink import KafkaSinkConfig, build_kafka_sink
from spate_kafka._source import KafkaSource
from spate_kafka.config import KafkaSourceConfig


class KafkaSourceFactory:
    """Builds a :class:`KafkaSource` from ``source: {kafka: ...}``."""

    config_model: ClassVar[type[KafkaSourceConfig]] = KafkaSourceConfig

    @staticmethod
    def build(config: KafkaSourceConfig, context: BuildContext) -> KafkaSource:
        return KafkaSource(config, meter=context.meter, component=context.component)


class KafkaSinkFactory:
    """Builds the pooled Kafka sink from ``sink: {kafka: ...}``."""

    config_model: ClassVar[type[KafkaSinkConfig]] = KafkaSinkConfig

    @staticmethod
    def build(config: KafkaSinkConfig, context: BuildContext) -> SinkPool:
        return build_kafka_sink(config, context)
