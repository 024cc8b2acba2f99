"""Configuration: YAML loading, interpolation, units and strict decoding into models."""

from spate.config._decode import ByteSize, Duration, decode, join_path, tls_file_errors
from spate.config._interpolate import interpolate, interpolate_string
from spate.config._loader import (
    RESERVED_SINK_NAMES,
    TOP_LEVEL_KEYS,
    ConnectorResolver,
    decode_connector,
    load_config,
    load_configs,
    load_section,
    parse_config,
    parse_configs,
)
from spate.config._schema_source import SchemaSource
from spate.config._units import format_duration, format_size, parse_duration, parse_size
from spate.config.models import (
    AdminConfig,
    BackpressureConfig,
    CheckpointConfig,
    ConnectorSpec,
    DeadLetterSettings,
    FrameworkSections,
    MetricsConfig,
    PipelineConfig,
    PipelineSection,
    ReadinessConfig,
    SupervisorConfig,
)

__all__ = [
    "RESERVED_SINK_NAMES",
    "TOP_LEVEL_KEYS",
    "AdminConfig",
    "BackpressureConfig",
    "ByteSize",
    "CheckpointConfig",
    "ConnectorResolver",
    "ConnectorSpec",
    "DeadLetterSettings",
    "Duration",
    "FrameworkSections",
    "MetricsConfig",
    "PipelineConfig",
    "PipelineSection",
    "ReadinessConfig",
    "SchemaSource",
    "SupervisorConfig",
    "decode",
    "decode_connector",
    "format_duration",
    "format_size",
    "interpolate",
    "interpolate_string",
    "join_path",
    "load_config",
    "load_configs",
    "load_section",
    "parse_config",
    "parse_configs",
    "parse_duration",
    "parse_size",
    "tls_file_errors",
]
