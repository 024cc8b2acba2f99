"""Core's built-in connectors pass the conformance suites third-party connectors run.

The memory source (``source: {memory: ...}``) runs :class:`SourceConformance`; the file
sink (``sink: {file: ...}``) runs :class:`SinkConformance` against its real file and the
capture sink (``sink: {capture: ...}``) against the rows it keeps (B1, B2, B4, B7, B17,
B29).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spate.sink import Sink
from spate.source import Source
from spate.testing import (
    CaptureSink,
    MemorySourceHandle,
    SequenceSource,
    memory_source,
    read_file_sink,
    sequence_payload,
)
from spate.testing._factories import CaptureSinkFactory, FileSinkFactory, MemorySourceFactory
from spate.testing.conformance import SinkConformance, SourceConformance


class TestMemorySourceConformance(SourceConformance):
    factory = MemorySourceFactory
    tag = "memory"
    poll_timeout = 0.0
    patience = 5.0

    def config(self) -> Mapping[str, object]:
        return {"partitions": 2, "records": 10}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [({"partitions": 0}, "partitions"), ({"batch_size": "many"}, "batch_size")]

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        self.data = {p: [f"m{p}-{o}".encode() for o in range(records)] for p in range(partitions)}
        self.handle: MemorySourceHandle | None = None
        return self.data

    def open_source(self) -> Source:
        committed = {}
        if self.handle is not None:
            committed = {lane.partition: pos for lane, pos in self.handle.committed.items()}
        source, self.handle = memory_source(self.data, batch_size=7, committed=committed)
        return source


class TestFileSinkConformance(SinkConformance):
    factory = FileSinkFactory
    tag = "file"

    def config(self) -> Mapping[str, object]:
        return {"path": str(self.workdir / "out.jsonl"), "max_rows": 1000}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [({"path": ""}, "path"), ({"path": "x", "max_rows": 0}, "max_rows")]

    def rows(self, count: int) -> list[object]:
        return [{"id": i, "name": f"row-{i}"} for i in range(count)]

    def written(self) -> list[object]:
        path = self.workdir / "out.jsonl"
        return list(read_file_sink(path)) if path.exists() else []

    def unreachable(self) -> tuple[Mapping[str, object], str]:
        missing = str(self.workdir / "no-such-dir" / "out.jsonl")
        return {"path": missing}, missing


class TestCaptureSinkConformance(SinkConformance):
    factory = CaptureSinkFactory
    tag = "capture"

    def config(self) -> Mapping[str, object]:
        return {"max_rows": 1000}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [({"max_rows": 0}, "max_rows"), ({"capacity": 0}, "capacity")]

    def build_sink(self, body: Mapping[str, object] | None = None) -> Sink:
        sink = super().build_sink(body)
        assert isinstance(sink, CaptureSink)
        self.sink = sink
        return sink

    def rows(self, count: int) -> list[object]:
        return [("row", i) for i in range(count)]

    def written(self) -> list[object]:
        return list(self.sink.script.rows)


class TestSequenceSourceConformance(SourceConformance):
    """The test kit's durable sequence source: commits outlive it (an offsets file)."""

    poll_timeout = 0.0
    patience = 5.0

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        self.shape = (partitions, records)
        return {
            p: [sequence_payload("seq", p, o).encode() for o in range(records)]
            for p in range(partitions)
        }

    def open_source(self) -> Source:
        partitions, records = self.shape
        return SequenceSource(
            self.workdir / "offsets.json",
            partitions=partitions,
            records_per_lane=records,
            batch_size=8,
        )
