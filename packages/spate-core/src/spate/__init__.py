"""spate: at-least-once Kafka to ClickHouse ETL with connector plugins.

The public API is what ``__all__`` lists; everything else is internal.
"""

from spate._clock import Clock, ManualClock, SystemClock
from spate._loading import load_config, load_configs
from spate._locks import lock_exclusive
from spate._secrets import NO_SECRET, REDACTED, Secret, display_url, redact, register_secret
from spate.checkpoint import AckStatus, AckToken
from spate.config import PipelineConfig, SupervisorConfig
from spate.errors import (
    AckError,
    ConfigError,
    DeserError,
    DeserErrorKind,
    ErrorClass,
    ErrorPolicy,
    FatalError,
    MissingConnectorError,
    PluginError,
    SinkError,
    SourceError,
    SpateError,
)
from spate.ops import NO_RECORD, Chain, ChainContext, ChainSpec, Deserializer, ManyDeserializer
from spate.pipeline import ExitReport, Pipeline, PipelineHealth, Supervisor
from spate.plugins import BuildContext, ComponentFactory, PluginKind
from spate.records import Headers, Lane, MetaSource, PayloadBatch, RecordMeta
from spate.sink import Offer, Sink, SinkPool
from spate.source import Source, SourceEvents

__version__ = "0.1.0"

__all__ = [
    "NO_RECORD",
    "NO_SECRET",
    "REDACTED",
    "AckError",
    "AckStatus",
    "AckToken",
    "BuildContext",
    "Chain",
    "ChainContext",
    "ChainSpec",
    "Clock",
    "ComponentFactory",
    "ConfigError",
    "DeserError",
    "DeserErrorKind",
    "Deserializer",
    "ErrorClass",
    "ErrorPolicy",
    "ExitReport",
    "FatalError",
    "Headers",
    "Lane",
    "ManualClock",
    "ManyDeserializer",
    "MetaSource",
    "MissingConnectorError",
    "Offer",
    "PayloadBatch",
    "Pipeline",
    "PipelineConfig",
    "PipelineHealth",
    "PluginError",
    "PluginKind",
    "RecordMeta",
    "Secret",
    "Sink",
    "SinkError",
    "SinkPool",
    "Source",
    "SourceError",
    "SourceEvents",
    "SpateError",
    "Supervisor",
    "SupervisorConfig",
    "SystemClock",
    "__version__",
    "display_url",
    "load_config",
    "load_configs",
    "lock_exclusive",
    "redact",
    "register_secret",
]
