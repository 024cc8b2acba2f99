"""spate-clickhouse passes spate's sink conformance suite against a ClickHouse replica.

The replica is the HTTP front over chDB (the real engine in a process of its own, so the
test process holds no chDB engine): delivered acks mean rows in the table (B2), teardown
fails what is held (B4), a retried batch under the same ``insert_deduplication_token``
lands once and a new token lands again (B9), a 5xx answer is retryable and the batch lands
after it (B12), values that do not fit their column are refused on append (B28), and an
unreachable replica fails start-up naming its URL (B29).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import pytest
from spate.config import decode
from spate.sink import SinkConnector
from spate.testing.conformance import SinkConformance
from spate_clickhouse import ClickHouseSinkFactory
from spate_clickhouse._writer import ClickHouseConnector
from spate_clickhouse.config import ClickHouseSinkConfig

from tests.support.chfront_fixtures import ChFront

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def replica(chfront_module: Callable[..., ChFront]) -> ChFront:
    return chfront_module()


class TestClickHouseSinkConformance(SinkConformance):
    factory = ClickHouseSinkFactory
    tag = "clickhouse"
    dedup_by_token = True

    @pytest.fixture(autouse=True)
    def _table(self, replica: ChFront) -> None:
        self.replica = replica
        self.table = f"conf_{uuid.uuid4().hex[:10]}"
        replica.client().command(
            f"CREATE TABLE {self.table} (id UInt64, name String, amount Float64) "
            "ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000"
        )

    def config(self) -> Mapping[str, object]:
        return {
            "table": self.table,
            "columns": ["id", "name", "amount"],
            "shards": [{"replicas": [self.replica.url]}],
            # `full` also checks the first row as a whole and fails the pipeline on a
            # mismatch (B20); the record-level path of B28 is the one under test here.
            "validate_schema": "names",
            "batch": {"max_rows": 1000, "linger": "1s"},
            "retry": {"initial": "10ms", "max": "100ms"},
            "timeouts": {"connect": "2s", "send_receive": "20s"},
        }

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        base = dict(self.config())
        return [
            (
                {**base, "settings": {"insert_deduplication_token": "x"}},
                "settings.insert_deduplication_token",
            ),
            ({**base, "validate_schema": "maybe"}, "validate_schema"),
            ({**base, "batch": {"linger": "0s"}}, "batch.linger"),
        ]

    def rows(self, count: int) -> list[object]:
        return [(i, f"name-{i}", i * 0.5) for i in range(count)]

    def written(self) -> list[object]:
        result = self.replica.client().query(f"SELECT id, name, amount FROM {self.table}")
        return [tuple(row) for row in result.result_rows]

    def bad_rows(self) -> Sequence[object]:
        return [("not a number", "x", 1.0), (1, "too few"), (-1, "negative", 0.0)]

    def open_connector(self) -> tuple[SinkConnector, str]:
        config = decode(ClickHouseSinkConfig, dict(self.config()), "sink.clickhouse")
        return ClickHouseConnector(config, "conformance"), self.replica.url

    def unreachable(self) -> tuple[Mapping[str, object], str]:
        url = "http://127.0.0.1:9"
        return {**self.config(), "shards": [{"replicas": [url]}]}, "127.0.0.1:9"

    @contextmanager
    def outage(self) -> Iterator[None]:
        self.replica.inject("5xx")
        try:
            yield
        finally:
            self.replica.recover()
