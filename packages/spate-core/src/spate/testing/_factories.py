"""Plugin factories for the test-kit components, so YAML pipelines can use them too.

Entry points (declared by spate-core) name these factory objects; the YAML tag is the
entry name:

* source ``memory`` — :class:`MemorySourceConfig`: generated payloads
  ``"<stream>:<partition>:<offset>"`` and/or fixed ``payloads``, bounded by default;
* source ``sequence`` — :class:`SequenceSourceConfig`: the kill-safe sequence source
  committing to an offsets file;
* sink ``capture`` — :class:`CaptureSinkConfig`: keeps rows in memory (always ``ok``);
* sink ``file`` — :class:`FileSinkConfig`: fsynced JSON lines appended to ``path``.

Sinks count their rows against the pipeline's byte budget from the ``BuildContext``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from spate.plugins._factory import BuildContext
from spate.testing._capture_sink import CaptureScript, CaptureSink
from spate.testing._file_sink import FileSink
from spate.testing._memory_source import MemorySource, memory_source
from spate.testing._sequence_source import SequenceSource, sequence_payload


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySourceConfig:
    """``source: {memory: ...}``."""

    stream: str = "memory"
    """Stream name of the lanes (the ``lane`` metric label is ``stream[partition]``)."""
    partitions: int = 1
    """Number of lanes."""
    records: int = 0
    """Generated records per lane (payload ``"<stream>:<partition>:<offset>"``)."""
    payloads: list[str] = field(default_factory=list)
    """Fixed UTF-8 payloads, dealt round-robin over the lanes after the generated ones."""
    bounded: bool = True
    """Drain and finish once everything is handed out."""
    batch_size: int = 100
    """Records per batch and lane."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.partitions < 1:
            yield "partitions", "must be at least 1"
        if self.records < 0:
            yield "records", "must not be negative"
        if self.batch_size < 1:
            yield "batch_size", "must be at least 1"


class MemorySourceFactory:
    """Builds a :class:`MemorySource` from :class:`MemorySourceConfig`."""

    config_model = MemorySourceConfig

    def build(self, config: MemorySourceConfig, context: BuildContext) -> MemorySource:
        data: dict[int, list[bytes]] = {
            p: [sequence_payload(config.stream, p, o).encode() for o in range(config.records)]
            for p in range(config.partitions)
        }
        for i, text in enumerate(config.payloads):
            data[i % config.partitions].append(text.encode())
        source, _ = memory_source(
            data,
            partitions=config.partitions,
            stream=config.stream,
            bounded=config.bounded,
            batch_size=config.batch_size,
        )
        return source


@dataclass(frozen=True, slots=True, kw_only=True)
class SequenceSourceConfig:
    """``source: {sequence: ...}``."""

    offsets_path: str
    """File holding the committed offsets (created on the first commit)."""
    stream: str = "seq"
    partitions: int = 2
    records_per_lane: int | None = 1000
    """Records per lane; ``null`` for an endless source."""
    batch_size: int = 50

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.offsets_path:
            yield "offsets_path", "must not be empty"
        if self.partitions < 1:
            yield "partitions", "must be at least 1"
        if self.batch_size < 1:
            yield "batch_size", "must be at least 1"


class SequenceSourceFactory:
    """Builds a :class:`SequenceSource` from :class:`SequenceSourceConfig`."""

    config_model = SequenceSourceConfig

    def build(self, config: SequenceSourceConfig, context: BuildContext) -> SequenceSource:
        return SequenceSource(
            config.offsets_path,
            stream=config.stream,
            partitions=config.partitions,
            records_per_lane=config.records_per_lane,
            batch_size=config.batch_size,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureSinkConfig:
    """``sink: {capture: ...}``."""

    max_rows: int = 100
    """Rows per sealed batch."""
    capacity: int | None = None
    """Refuse rows while this many are buffered (backpressure); ``null`` for no limit."""
    row_bytes: int = 64
    """Bytes counted against ``backpressure.max_inflight_bytes`` per buffered row."""
    threaded: bool = True
    """Write on a worker thread (as real sinks do) instead of inline."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_rows < 1:
            yield "max_rows", "must be at least 1"
        if self.capacity is not None and self.capacity < 1:
            yield "capacity", "must be at least 1"


class CaptureSinkFactory:
    """Builds a :class:`CaptureSink` (its script is ``sink.script``)."""

    config_model = CaptureSinkConfig

    def build(self, config: CaptureSinkConfig, context: BuildContext) -> CaptureSink:
        return CaptureSink(
            context.component,
            CaptureScript(),
            max_rows=config.max_rows,
            capacity=config.capacity,
            row_bytes=config.row_bytes,
            budget=context.budget,
            clock=context.clock,
            threaded=config.threaded,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSinkConfig:
    """``sink: {file: ...}``."""

    path: str
    """The JSON-lines file to append to (created if missing)."""
    max_rows: int = 100
    row_bytes: int = 64
    threaded: bool = True

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.path:
            yield "path", "must not be empty"
        if self.max_rows < 1:
            yield "max_rows", "must be at least 1"


class FileSinkFactory:
    """Builds a :class:`FileSink` from :class:`FileSinkConfig`."""

    config_model = FileSinkConfig

    def build(self, config: FileSinkConfig, context: BuildContext) -> FileSink:
        return FileSink(
            config.path,
            context.component,
            max_rows=config.max_rows,
            row_bytes=config.row_bytes,
            budget=context.budget,
            clock=context.clock,
            threaded=config.threaded,
        )


memory_source_factory = MemorySourceFactory()
sequence_source_factory = SequenceSourceFactory()
capture_sink_factory = CaptureSinkFactory()
file_sink_factory = FileSinkFactory()
