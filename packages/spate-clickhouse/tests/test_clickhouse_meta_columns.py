"""Metadata columns in the ``columns:`` list (``{name: $source}``, ADR 0020): parsed and
refused with their dotted path (B252), types checked against the table (B253) and
created by ``create_table`` (B254)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from spate.cli._main import main
from spate.config import decode
from spate.errors import ConfigError, SinkError
from spate.records import MetaColumn, MetaSource
from spate_clickhouse._ddl import create_table_sql
from spate_clickhouse._schema import SchemaCheck
from spate_clickhouse.config import ClickHouseSinkConfig

PATH = "sinks.events.clickhouse"
COLUMNS: list[Any] = [
    {"id": "Int64"},
    {"kafka_offset": "$offset"},
    {"kafka_partition": "$partition"},
    {"kafka_ts": "$timestamp"},
    {"kafka_ms": "$timestamp_ms"},
    {"kafka_topic": "$topic"},
    {"kafka_key": "$key"},
    {"tenant": "$header.tenant"},
    {"raw": "$value"},
]


def _decode(**body: Any) -> ClickHouseSinkConfig:
    base: dict[str, Any] = {
        "table": "events",
        "columns": COLUMNS,
        "shards": [{"replicas": ["http://127.0.0.1:8123"]}],
    }
    base.update(body)
    return decode(ClickHouseSinkConfig, base, PATH)


def test_b252_metadata_columns_parse_with_their_positions() -> None:
    cfg = _decode()
    assert cfg.column_specs[0].meta is None
    assert cfg.meta_columns == (
        MetaColumn("kafka_offset", MetaSource("offset"), 1),
        MetaColumn("kafka_partition", MetaSource("partition"), 2),
        MetaColumn("kafka_ts", MetaSource("timestamp"), 3),
        MetaColumn("kafka_ms", MetaSource("timestamp_ms"), 4),
        MetaColumn("kafka_topic", MetaSource("topic"), 5),
        MetaColumn("kafka_key", MetaSource("key"), 6),
        MetaColumn("tenant", MetaSource("header", "tenant"), 7),
        MetaColumn("raw", MetaSource("value"), 8),
    )


@pytest.mark.parametrize("source", ["$offsett", "$header.", "$headers.tenant"])
def test_b252_an_unknown_metadata_name_is_refused_with_its_dotted_path(source: str) -> None:
    with pytest.raises(ConfigError) as info:
        _decode(columns=["id", {"x": source}])
    assert info.value.path == f"{PATH}.columns[1].x"
    assert "unknown record metadata" in info.value.message
    assert "$header.<name>" in info.value.message


def test_b254_create_table_gives_metadata_columns_their_types() -> None:
    sql = create_table_sql(_decode(), None)
    for line in (
        "`id`              Int64",
        "`kafka_offset`    Int64",
        "`kafka_partition` Int32",
        "`kafka_ts`        DateTime64(3, 'UTC')",
        "`kafka_ms`        Int64",
        "`kafka_topic`     LowCardinality(String)",
        "`kafka_key`       Nullable(String)",
        "`tenant`          Nullable(String)",
        "`raw`             String",
    ):
        assert line in sql


def _server(**overrides: str) -> list[tuple[str, str]]:
    types = {
        "id": "Int64",
        "kafka_offset": "UInt64",
        "kafka_partition": "Int32",
        "kafka_ts": "DateTime",
        "kafka_ms": "Int64",
        "kafka_topic": "LowCardinality(String)",
        "kafka_key": "Nullable(String)",
        "tenant": "LowCardinality(Nullable(String))",
        "raw": "String",
    }
    types.update(overrides)
    return list(types.items())


@pytest.mark.parametrize("mode", ["off", "names", "full"])
def test_b253_suitable_table_types_pass_in_every_mode(mode: Any) -> None:
    SchemaCheck(mode, "events", _decode().column_specs).check("r1", _server())


@pytest.mark.parametrize(
    ("column", "type_name", "says"),
    [
        ("kafka_offset", "String", "an integer type"),
        ("kafka_ts", "Int64", "DateTime or DateTime64"),
        ("kafka_topic", "Int32", "FixedString or String"),
        ("tenant", "String", "make it Nullable"),
        ("kafka_key", "LowCardinality(String)", "make it Nullable"),
        ("raw", "Float64", "FixedString or String"),
    ],
)
def test_b253_a_table_type_that_cannot_hold_the_metadata_is_refused_at_start(
    column: str, type_name: str, says: str
) -> None:
    with pytest.raises(SinkError) as info:
        SchemaCheck("off", "events", _decode().column_specs).check(
            "r1", _server(**{column: type_name})
        )
    assert f"column {column} holds" in info.value.reason and says in info.value.reason


def test_b252_spate_validate_refuses_an_unknown_metadata_name_with_its_place(
    tmp_path: Path,
) -> None:
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        """pipeline: {name: v}
source:
  kafka: {brokers: "127.0.0.1:1", topic: t, group_id: g}
deserializer:
  json: {framing: single}
sink:
  clickhouse:
    table: events
    columns: [id, {kafka_offset: $offset}, {tenant: $headers.tenant}]
    shards: [{replicas: ["http://127.0.0.1:1"]}]
"""
    )
    stderr = io.StringIO()
    assert main(["validate", str(config)], stdout=io.StringIO(), stderr=stderr) == 2
    assert (
        "pipeline.yaml:9:45: sink.clickhouse.columns[2].tenant: unknown record metadata "
        "'$headers.tenant'" in stderr.getvalue()
    )
    good = config.read_text().replace("$headers.tenant", "$header.tenant")
    config.write_text(good)
    assert main(["validate", str(config)], stdout=io.StringIO(), stderr=io.StringIO()) == 0


@pytest.mark.parametrize("wrapper", ["tiered", "tee"])
def test_b258_metadata_columns_behind_a_tier_or_a_tee_are_refused_at_start(
    tmp_path: Path, wrapper: str
) -> None:
    from spate import Pipeline, load_config

    clickhouse = (
        "{clickhouse: {table: events, columns: [id, {kafka_offset: $offset}], "
        'shards: [{replicas: ["http://127.0.0.1:1"]}]}}'
    )
    body = (
        f"tiered: {{tiers: [{{memory: {{max_records: 10}}}}], terminal: {clickhouse}}}"
        if wrapper == "tiered"
        else f"tee: {{sinks: [{clickhouse}, {{capture: {{}}}}]}}"
    )
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"""pipeline: {{name: v}}
admin: {{listen: none}}
source:
  kafka: {{brokers: "127.0.0.1:1", topic: t, group_id: g}}
sink:
  {body}
"""
    )
    with pytest.raises(ConfigError) as info:
        Pipeline.from_config(load_config(config), handle_signals=False)
    assert info.value.path.endswith(".clickhouse.columns")
    assert "kafka_offset: $offset" in info.value.message
    assert "not supported behind a tier or a tee" in info.value.message
