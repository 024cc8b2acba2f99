"""Core's built-in plugins: the test kit's memory source, capture sink and file sink.

They are declared as entry points of spate-core itself (``memory`` in ``spate.sources``,
``capture`` and ``file`` in ``spate.sinks``), exactly as a third-party connector would
be, so ``spate plugins`` lists them and a YAML file can use them without
infrastructure::

    source:
      memory: {partitions: 2, records: 1000}
    sink:
      file: {path: out.jsonl}

They live in the test kit and :mod:`spate.testing` exports them; the entry points name
them there (``spate.testing:MemorySourceFactory`` …).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from spate._context import BuildContext
from spate.testing._capture_sink import CaptureSink, capture_sink
from spate.testing._file_sink import FileSink
from spate.testing._memory_source import MemorySource, memory_source


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySourceConfig:
    """``source: {memory: ...}`` — lanes of payloads held in memory."""

    partitions: int = 1
    """Number of lanes (partitions), numbered from 0."""
    records: int = 0
    """Generated payloads per lane: the UTF-8 text ``<partition>:<index>``."""
    payloads: list[str] = field(default_factory=list)
    """Payloads (UTF-8 text) appended to every lane after the generated ones."""
    stream: str = "memory"
    """Stream name of the lanes (``memory[0]`` …)."""
    bounded: bool = True
    """Drain and finish once everything is handed out; unbounded runs until stopped."""
    batch_size: int = 100
    """Payloads per batch at most."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.partitions < 1:
            yield "partitions", "must be at least 1"
        if self.records < 0:
            yield "records", "must not be negative"
        if self.batch_size < 1:
            yield "batch_size", "must be at least 1"


class MemorySourceFactory:
    """Builds the test kit's memory source from ``source: {memory: ...}``."""

    config_model: ClassVar[type[MemorySourceConfig]] = MemorySourceConfig

    @staticmethod
    def build(config: MemorySourceConfig, context: BuildContext) -> MemorySource:
        extra = [p.encode() for p in config.payloads]
        data = {
            p: [f"{p}:{i}".encode() for i in range(config.records)] + extra
            for p in range(config.partitions)
        }
        source, _handle = memory_source(
            data,
            partitions=config.partitions,
            stream=config.stream,
            bounded=config.bounded,
            batch_size=config.batch_size,
        )
        return source


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureSinkConfig:
    """``sink: {capture: ...}`` — keeps written rows in memory (tests and demos)."""

    max_rows: int = 100
    """Rows per written batch at most."""
    row_bytes: int = 64
    """Estimated size of one row, counted against ``backpressure.max_inflight_bytes``."""
    threaded: bool = True
    """Write on a worker thread (as real sinks do) instead of inline."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_rows < 1:
            yield "max_rows", "must be at least 1"
        if self.row_bytes < 0:
            yield "row_bytes", "must not be negative"


class CaptureSinkFactory:
    """Builds the test kit's capture sink from ``sink: {capture: ...}``."""

    config_model: ClassVar[type[CaptureSinkConfig]] = CaptureSinkConfig

    @staticmethod
    def build(config: CaptureSinkConfig, context: BuildContext) -> CaptureSink:
        sink, _script = capture_sink(
            context.component,
            max_rows=config.max_rows,
            row_bytes=config.row_bytes,
            budget=context.budget,
            clock=context.clock,
            threaded=config.threaded,
        )
        return sink


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSinkConfig:
    """``sink: {file: ...}`` — appends rows as JSON lines, fsynced before acknowledging."""

    path: str
    """The file to append to; several processes may share it."""
    max_rows: int = 1000
    """Rows per write (one fsync each) at most."""
    row_bytes: int = 64
    """Estimated size of one row, counted against ``backpressure.max_inflight_bytes``."""
    threaded: bool = True
    """Write on a worker thread (as real sinks do) instead of inline."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.path.strip():
            yield "path", "must not be empty"
        if self.max_rows < 1:
            yield "max_rows", "must be at least 1"
        if self.row_bytes < 0:
            yield "row_bytes", "must not be negative"


def _json_default(value: object) -> object:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    raise TypeError(f"{type(value).__name__} cannot be written as JSON")


def json_line(row: object) -> bytes:
    """One row as a JSON line; bytes (undecoded payloads) are written as UTF-8 text."""
    if isinstance(row, (bytes, bytearray, memoryview)):
        row = _json_default(row)
    text = json.dumps(row, separators=(",", ":"), sort_keys=True, default=_json_default)
    return text.encode() + b"\n"


class FileSinkFactory:
    """Builds the test kit's fsynced JSON-lines file sink from ``sink: {file: ...}``."""

    config_model: ClassVar[type[FileSinkConfig]] = FileSinkConfig

    @staticmethod
    def build(config: FileSinkConfig, context: BuildContext) -> FileSink:
        return FileSink(
            config.path,
            context.component,
            max_rows=config.max_rows,
            row_bytes=config.row_bytes,
            budget=context.budget,
            clock=context.clock,
            threaded=config.threaded,
            encode=json_line,
        )
