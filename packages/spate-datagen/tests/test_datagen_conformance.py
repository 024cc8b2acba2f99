"""spate-datagen's source passes spate's source conformance suite (B1, B7, B17).

Every generated event is handed out once per lane in offset order, then ``drained()``
once; positions never pass what was handed out; nothing is committed by the source on
its own; pause holds a lane. The source keeps no commits across runs (it starts again
from the first event), so the resume-at-commit test does not apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from spate.source import Source
from spate.testing.conformance import SourceConformance
from spate_datagen import DatagenSourceFactory
from spate_datagen._codec import encoder
from spate_datagen._events import storefront_events
from spate_datagen._source import DatagenSource, DatagenSourceConfig


class _DatagenConformance(SourceConformance):
    factory = DatagenSourceFactory
    tag = "datagen"
    format: ClassVar[str] = "avro"
    poll_timeout = 0.0
    patience = 10.0
    resumes_from_commits = False

    def config(self) -> Mapping[str, object]:
        return {"count": 100, "format": self.format, "partitions": 2}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [
            ({"count": -1}, "count"),
            ({"partitions": 0}, "partitions"),
            ({"format": "xml"}, "format"),
        ]

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        self.settings = DatagenSourceConfig(
            count=partitions * records,
            seed=7,
            format="json" if self.format == "json" else "avro",
            partitions=partitions,
            batch_size=5,
        )
        encode = encoder(self.settings.format)
        lanes: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        for event in storefront_events(self.settings.count, seed=self.settings.seed):
            lanes[event.order_id % partitions].append(bytes(encode(event)))
        return lanes

    def open_source(self) -> Source:
        return DatagenSource(self.settings)


class TestDatagenAvroSourceConformance(_DatagenConformance):
    format = "avro"


class TestDatagenJsonSourceConformance(_DatagenConformance):
    format = "json"
