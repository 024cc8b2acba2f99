"""Core's tiers pass spate's sink conformance suite in front of a frame-taking sink (B233).

The memory tier, the spool and the tee declare :class:`~spate.sink.FrameSink` (the spool
also :class:`~spate.sink.RowBatchSink`) when the sink after them does; here each stands
in front of the Parquet sink on local files (which declares both), built from YAML
through the ``tiered`` and ``tee`` entry points as a pipeline builds them, so the suite
checks their ``offer``, ``offer_rows`` and ``offer_frame`` as it checks the Parquet
sink's own: bad rows by position, the rest all or nothing, acks released once, every row
in the destination after ``flush()`` (B2, B4, B28, B39, B95). Promises: B233.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from spate.plugins import TeeSinkFactory, TieredSinkFactory

from .readback import local_files, parquet_rows
from .test_parquet_conformance import TestParquetLocalFilesConformance as ParquetSuite


def _key(row: object) -> object:
    return tuple(sorted(row.items())) if isinstance(row, dict) else row


class TestMemoryTierConformance(ParquetSuite):
    """``tiered`` with a memory tier in front of the Parquet sink."""

    factory = TieredSinkFactory
    tag = "tiered"

    def tiers(self) -> list[Mapping[str, object]]:
        return [{"memory": {"max_records": 5}}]

    def config(self) -> Mapping[str, object]:
        return {"tiers": self.tiers(), "terminal": {"parquet": dict(ParquetSuite.config(self))}}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        terminal = {"parquet": {**ParquetSuite.config(self), "max_records": 0}}
        return [({**self.config(), "terminal": terminal}, "terminal.parquet.max_records")]

    def bad_rows(self) -> Sequence[object]:
        # A tier takes a row before the sink after it has checked it: a row that sink
        # refuses is a record error when the tier hands it on (B111), not on offer.
        return ()

    def unreachable(self) -> tuple[Mapping[str, object], str] | None:
        blocker = self.workdir / "a-file"
        blocker.write_bytes(b"")
        path = str(blocker / "lake")
        terminal = {"parquet": {**ParquetSuite.config(self), "path": path}}
        return {"tiers": self.tiers(), "terminal": terminal}, path


class TestSpoolTierConformance(TestMemoryTierConformance):
    """``tiered`` with a spool (``ack: terminal``) in front of the Parquet sink."""

    def tiers(self) -> list[Mapping[str, object]]:
        return [{"spool": {"dir": str(self.workdir / "spool"), "max_records": 5}}]


class TestTeeConformance(ParquetSuite):
    """``tee`` over two Parquet sinks; a row counts as written once both lakes hold it."""

    factory = TeeSinkFactory
    tag = "tee"

    def branch(self, lake: str) -> dict[str, object]:
        return {**ParquetSuite.config(self), "path": str(self.workdir / lake)}

    def bad_rows(self) -> Sequence[object]:
        # Each branch takes a row on offer; one a branch refuses is a record error for
        # its record when the tee offers it (B111), not a refusal of the whole offer.
        return ()

    def config(self) -> Mapping[str, object]:
        return {"sinks": [{"parquet": self.branch("lake")}, {"parquet": self.branch("other")}]}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [({"sinks": []}, "sinks")]

    def unreachable(self) -> tuple[Mapping[str, object], str] | None:
        return None

    def written(self) -> list[object]:
        lake = Counter(_key(r) for r in parquet_rows(local_files(self.workdir / "lake")))
        other = Counter(_key(r) for r in parquet_rows(local_files(self.workdir / "other")))
        both = lake & other
        return [dict(k) if isinstance(k, tuple) else k for k in both.elements()]
