"""The ClickHouse sink passes spate's sink conformance suite on an HTTP front (B2, B4, B7,
B9, B12, B17, B28, B29, B95): each test gets a fresh table with a dedup window; row
batches (``offer_rows``) and frames (``offer_frame``) are checked as ``offer`` is."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from spate.config import decode
from spate.sink import SinkConnector
from spate.testing.conformance import SinkConformance
from spate_clickhouse import ClickHouseConnector, ClickHouseSinkConfig, ClickHouseSinkFactory

from tests.support.chfront_fixtures import ChFront

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def conformance_front(chfront_module: Callable[..., ChFront]) -> ChFront:
    return chfront_module()


class TestClickHouseSinkConformance(SinkConformance):
    factory = ClickHouseSinkFactory
    tag = "clickhouse"
    dedup_by_token = True
    patience = 30.0

    front: ChFront
    table: str
    client: Any

    @pytest.fixture(autouse=True)
    def _fresh_table(self, conformance_front: ChFront) -> Iterator[None]:
        self.front = conformance_front
        self.table = f"conf_{uuid.uuid4().hex[:12]}"
        self.client = conformance_front.client()
        self.client.command(
            f"CREATE TABLE {self.table} (id UInt64, name String, amount Nullable(Decimal(9, 2))) "
            "ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100"
        )
        yield
        conformance_front.recover()

    def config(self) -> Mapping[str, object]:
        return {
            "table": self.table,
            "columns": ["id", "name", "amount"],
            "shards": [{"replicas": [self.front.url]}],
            "batch": {"max_rows": 7, "linger": "50ms"},
            "retry": {"initial": "20ms", "max": "200ms"},
            "timeouts": {"connect": "2s", "send_receive": "10s"},
        }

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        base = dict(self.config())
        return [
            ({**base, "settings": {"insert_deduplicate": 0}}, "settings.insert_deduplicate"),
            ({**base, "columns": ["id", "id"]}, "columns[1]"),
            ({**base, "compression": "brotli"}, "compression"),
        ]

    def rows(self, count: int) -> list[object]:
        return [(i, f"name {i}", None if i % 3 else f"{i}.25") for i in range(count)]

    def written(self) -> list[object]:
        result = self.client.query(f"SELECT id, name, amount FROM {self.table}")
        return [
            (i, name, None if amount is None else f"{amount}")
            for i, name, amount in result.result_rows
        ]

    def bad_rows(self) -> Sequence[object]:
        return [
            ("not an id", "x", None),
            (1, "too", None, "many"),
            {"name": "no id"},
            (2, "x", "1.234"),
        ]

    def frame(self, rows: Sequence[object]) -> object | None:
        import polars as pl

        tuples = [row for row in rows if isinstance(row, tuple)]
        return pl.DataFrame(
            {
                "id": pl.Series([r[0] for r in tuples], dtype=pl.UInt64),
                "name": [r[1] for r in tuples],
                "amount": pl.Series([r[2] for r in tuples], dtype=pl.String),
                "__spate_row": pl.Series(range(len(tuples)), dtype=pl.UInt32),
            }
        )

    def bad_frame_rows(self) -> Sequence[object]:
        return [(2, "x", "1.234"), (3, "y", "12345678901.5")]

    def open_connector(self) -> tuple[SinkConnector, str] | None:
        config = decode(ClickHouseSinkConfig, dict(self.config()), "sink.clickhouse")
        return ClickHouseConnector(config, "conformance"), self.front.url

    def unreachable(self) -> tuple[Mapping[str, object], str] | None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        return {**self.config(), "shards": [{"replicas": [url]}]}, url

    def outage(self) -> AbstractContextManager[object] | None:
        @contextmanager
        def unavailable() -> Iterator[None]:
            self.front.inject("5xx", only="insert")
            try:
                yield
            finally:
                self.front.recover()

        return unavailable()
