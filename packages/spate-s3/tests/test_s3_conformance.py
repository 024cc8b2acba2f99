"""spate-s3's source passes spate's source conformance suite (B1, B7, B17, B25).

Over a local directory (``file://``, the same reader as S3) and an in-memory
coordination store: every record once in order then ``drained()`` once, positions never
past what was handed out, no commit of its own, an exact resume at a synchronous commit
(the progress the coordination store keeps), pause and resume. One split, so one lane.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spate.source import Source
from spate.testing.conformance import SourceConformance
from spate_coordination import MemoryStore
from spate_s3 import S3SourceConfig, S3SourceFactory

from tests.s3.s3kit import coordination, make_source, record_line


class TestS3SourceConformance(SourceConformance):
    factory = S3SourceFactory
    tag = "s3"
    partitions = 1
    records = 40
    poll_timeout = 0.1
    patience = 20.0

    def config(self) -> Mapping[str, object]:
        return {"url": "s3://bucket/prefix/"}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [
            ({"url": "s3://bucket/", "batch_records": 0}, "batch_records"),
            ({"url": "s3://bucket/", "framing": "xml"}, "framing"),
        ]

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        root = self.workdir / "in"
        root.mkdir()
        lines = [record_line(0, r) for r in range(records)]
        half = records // 2
        (root / "a.ndjson").write_bytes(b"".join(x + b"\n" for x in lines[:half]))
        (root / "b.ndjson").write_bytes(b"".join(x + b"\n" for x in lines[half:]))
        self.store = MemoryStore(2.0)
        self.job = coordination().job
        return {0: lines}

    def open_source(self) -> Source:
        cfg = S3SourceConfig(url=f"file://{self.workdir / 'in'}", batch_records=7)
        source, _ = make_source(cfg, self.store, coordination(self.job))
        return source
