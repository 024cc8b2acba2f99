"""spate-huggingface passes spate's sink conformance suite against the Hub test server.

The destination is a dataset repository on the test server implementing the Hub's
documented commit API; rows are read back from the committed Parquet files. Promises:
B2, B4, B17, B22, B28, B29, B39; frames of the columnar path: B173.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pytest
from spate.testing.conformance import SinkConformance
from spate_huggingface import HuggingFaceSinkFactory

from tests.support.hub import HubServer

from .harness import REPO, TOKEN, parquet_rows

SCHEMA = {"id": "int64", "name": "string", "amount": "float64"}


class TestHuggingFaceSinkConformance(SinkConformance):
    factory = HuggingFaceSinkFactory
    tag = "huggingface"
    patience = 30.0

    @pytest.fixture(autouse=True)
    def _hub(self) -> Iterator[None]:
        with HubServer(token=TOKEN) as hub:
            hub.create_repo(REPO)
            self.hub = hub
            yield

    def config(self) -> Mapping[str, object]:
        return {
            "repo": REPO,
            "endpoint": self.hub.endpoint,
            "token": TOKEN,
            "schema": SCHEMA,
            "max_records": 7,
            "retry": {"initial": "10ms", "max": "100ms"},
            "request_timeout": "5s",
        }

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        base = dict(self.config())
        return [
            ({**base, "repo": ""}, "repo"),
            ({**base, "schema": {"id": "int65"}}, "schema"),
            ({**base, "max_records": 0}, "max_records"),
            ({**base, "window_time": "record"}, "time_column"),
            ({**base, "encoder": {"compression": "zstd", "level": 30}}, "encoder.level"),
            ({**base, "path_template": "data/{name}.parquet"}, "path_template"),
        ]

    def rows(self, count: int) -> list[object]:
        return [{"id": i, "name": f"name-{i}", "amount": i * 1.5} for i in range(count)]

    def written(self) -> list[object]:
        return list(parquet_rows(self.hub.files(REPO)))

    def bad_rows(self) -> Sequence[object]:
        return [
            {"id": "not a number", "name": "x", "amount": 1.0},
            {"id": 1, "name": 2, "amount": 1.0},
            {"id": 1, "unknown": "x"},
            (1, "too few"),
            "not a row",
        ]

    def frame(self, rows: Sequence[object]) -> object:
        """Rows as the polars frame a columnar chain hands the sink (B173)."""
        import polars as pl

        frame = pl.DataFrame(
            list(rows), schema={"id": pl.Int64, "name": pl.String, "amount": pl.Float64}
        )
        return frame.with_row_index("__spate_row")

    def unreachable(self) -> tuple[Mapping[str, object], str]:
        return {**self.config(), "endpoint": "http://127.0.0.1:9", "request_timeout": "1s"}, (
            "127.0.0.1:9"
        )
