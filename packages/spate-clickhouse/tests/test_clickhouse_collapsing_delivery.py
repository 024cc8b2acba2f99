"""A collapsing table needs effectively-once delivery: refused at build otherwise (B378)."""

from __future__ import annotations

import pytest
from spate import ConfigError

from tests.clickhouse.sinkkit import BuiltSink, build_sink


def _build(engine: str, delivery: str) -> BuiltSink:
    body = {
        "table": "items",
        "columns": [{"id": "Int64"}, {"_sign": "Int8"}],
        "shards": [{"replicas": ["http://127.0.0.1:1"]}],
        "create_table": "if_missing",
        "table_options": {"engine": engine, "order_by": ["id"]},
    }
    return build_sink(body, "items", replay_blocks=0 if delivery == "effectively_once" else None)


@pytest.mark.parametrize(
    "engine",
    [
        "CollapsingMergeTree(_sign)",
        "VersionedCollapsingMergeTree(_sign, _version)",
        "ReplicatedCollapsingMergeTree('/t/{shard}/items', '{replica}', _sign)",
    ],
)
def test_b378_a_collapsing_engine_without_effectively_once_is_refused_with_the_reason(
    engine: str,
) -> None:
    with pytest.raises(ConfigError) as raised:
        _build(engine, "at_least_once")
    assert raised.value.path == "items.table_options.engine"
    assert "needs pipeline.delivery: effectively_once" in str(raised.value)
    assert "a block written twice" in str(raised.value)


def test_b378_a_collapsing_engine_under_effectively_once_builds() -> None:
    _build("CollapsingMergeTree(_sign)", "effectively_once").sink.close()
    _build("ReplacingMergeTree(_version, _is_deleted)", "at_least_once").sink.close()
