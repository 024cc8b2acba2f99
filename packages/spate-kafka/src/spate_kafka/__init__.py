"""Kafka source and sink for spate, on confluent-kafka.

``source: {kafka: {brokers, topic, group_id, ...}}`` — see :class:`KafkaSourceConfig`;
``sink: {kafka: {brokers, topic, ...}}`` — see :class:`KafkaSinkConfig`.
"""

from spate_kafka._factory import KafkaSinkFactory, KafkaSourceFactory
from spate_kafka._security import KafkaSaslConfig, KafkaSecurityConfig
from spate_kafka._sink import KafkaShardWriter, KafkaSinkConfig, KafkaSinkConnector
from spate_kafka._source import KafkaSource
from spate_kafka.cli import DlqCommand
from spate_kafka.config import CONSUMER_DEFAULTS, KafkaSourceConfig

__version__ = "0.1.0"

__all__ = [
    "CONSUMER_DEFAULTS",
    "DlqCommand",
    "KafkaSaslConfig",
    "KafkaSecurityConfig",
    "KafkaShardWriter",
    "KafkaSinkConfig",
    "KafkaSinkConnector",
    "KafkaSinkFactory",
    "KafkaSource",
    "KafkaSourceConfig",
    "KafkaSourceFactory",
    "__version__",
]
