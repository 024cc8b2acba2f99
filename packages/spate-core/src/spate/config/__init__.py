"""Configuration: YAML loading, interpolation, units and strict decoding into models."""

from spate.config._decode import ByteSize, Duration, decode, join_path
from spate.config._units import format_duration, format_size, parse_duration, parse_size

__all__ = [
    "ByteSize",
    "Duration",
    "decode",
    "format_duration",
    "format_size",
    "join_path",
    "parse_duration",
    "parse_size",
]
