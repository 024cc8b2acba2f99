"""The test kit's own sources pass the source contract suite connectors run."""

from __future__ import annotations

from pathlib import Path

import pytest
from spate.source import Source
from spate.testing import MemorySourceHandle, SequenceSource, memory_source, sequence_payload
from spate.testing.contracts import SourceContract


class TestMemorySourceContract(SourceContract):
    poll_timeout = 0.0
    patience = 5.0

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


class TestSequenceSourceContract(SourceContract):
    poll_timeout = 0.0
    patience = 5.0

    @pytest.fixture(autouse=True)
    def _dir(self, tmp_path: Path) -> None:
        self.offsets = tmp_path / "offsets.json"

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        self.partitions_n, self.records_n = partitions, records
        return {
            p: [sequence_payload("seq", p, o).encode() for o in range(records)]
            for p in range(partitions)
        }

    def open_source(self) -> Source:
        return SequenceSource(
            self.offsets,
            partitions=self.partitions_n,
            records_per_lane=self.records_n,
            batch_size=8,
        )
