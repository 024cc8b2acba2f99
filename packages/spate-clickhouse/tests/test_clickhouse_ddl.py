"""Table DDL from the records' schema: the documented type mapping, ``table_options`` and
``spate schema ddl`` (B59; B29: a column whose type cannot be derived is named)."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from spate.cli._main import main
from spate.config import decode
from spate.schema import Field, FieldKind, FieldType
from spate_avro._describe import record_fields
from spate_avro._schema import parse_schema_text
from spate_clickhouse._ddl import DdlError, clickhouse_type, create_table_sql
from spate_clickhouse.config import ClickHouseSinkConfig, TableOptions

AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "total", "type": "double"},
        {"name": "region", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "hash", "type": {"type": "fixed", "name": "H", "size": 16}},
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        },
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "status", "type": {"type": "enum", "name": "S", "symbols": ["NEW", "PAID"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}},
        {
            "name": "ship",
            "type": {
                "type": "record",
                "name": "Ship",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "int"}],
            },
        },
    ],
}
EXPECTED = {
    "order_id": "Int64",
    "qty": "Int32",
    "ok": "Bool",
    "ratio": "Float32",
    "total": "Float64",
    "region": "String",
    "raw": "String",
    "hash": "FixedString(16)",
    "ms": "DateTime64(3, 'UTC')",
    "us": "DateTime64(6, 'UTC')",
    "day": "Date32",
    "id": "UUID",
    "price": "Decimal(12, 2)",
    "note": "Nullable(String)",
    "status": "Enum8('NEW' = 0, 'PAID' = 1)",
    "tags": "Array(String)",
    "attrs": "Map(String, Nullable(Int64))",
    "ship": "Tuple(`city` String, `zip` Int32)",
}


def _fields() -> tuple[Field, ...]:
    fields = record_fields(parse_schema_text(json.dumps(AVRO)))
    assert fields is not None
    return fields


def _sink(**extra: Any) -> ClickHouseSinkConfig:
    body = {
        "table": "shop.orders",
        "columns": list(EXPECTED),
        "shards": [{"replicas": ["http://127.0.0.1:1"]}],
        **extra,
    }
    return decode(ClickHouseSinkConfig, body, "sinks.orders.clickhouse")


def test_avro_types_map_as_documented() -> None:
    options = TableOptions()
    got = {f.name: clickhouse_type(f.type, options) for f in _fields()}
    assert got == EXPECTED


def test_settings_choose_low_cardinality_strings_and_enums() -> None:
    options = TableOptions(strings="low_cardinality", enums="low_cardinality")
    got = {f.name: clickhouse_type(f.type, options) for f in _fields()}
    assert got["region"] == "LowCardinality(String)"
    assert got["note"] == "LowCardinality(Nullable(String))"
    assert got["status"] == "LowCardinality(String)"


def test_wide_enums_take_enum16_and_protobuf_numbers() -> None:
    wide = FieldType(kind=FieldKind.ENUM, symbols=("A", "B"), numbers=(0, 300))
    assert clickhouse_type(wide, TableOptions()) == "Enum16('A' = 0, 'B' = 300)"


def test_create_table_uses_the_table_options() -> None:
    config = _sink(
        table_options={
            "order_by": ["region", "order_id"],
            "partition_by": "toYYYYMM(ms)",
            "ttl": "ms + INTERVAL 90 DAY",
            "settings": {"index_granularity": 8192},
            "on_cluster": "main",
        }
    )
    sql = create_table_sql(config, _fields())
    assert sql.startswith("CREATE TABLE IF NOT EXISTS `shop`.`orders` ON CLUSTER `main`\n(")
    assert "ENGINE = ReplacingMergeTree\nPARTITION BY toYYYYMM(ms)\n" in sql
    assert "ORDER BY (`region`, `order_id`)\nTTL ms + INTERVAL 90 DAY\n" in sql
    assert sql.endswith(
        "SETTINGS index_granularity = 8192, non_replicated_deduplication_window = 1000"
    )


def test_default_engine_is_replacing_merge_tree_with_the_dedup_window() -> None:
    sql = create_table_sql(_sink(), _fields())
    assert "ENGINE = ReplacingMergeTree\nORDER BY (`order_id`)\n" in sql
    assert "non_replicated_deduplication_window = 1000" in sql
    replicated = _sink(table_options={"engine": "ReplicatedReplacingMergeTree"})
    assert "SETTINGS replicated_deduplication_window = 1000" in create_table_sql(
        replicated, _fields()
    )


def test_b59_declared_types_win_and_unknown_columns_are_named_b29() -> None:
    config = _sink(columns=["order_id", {"region": "LowCardinality(String)"}])
    sql = create_table_sql(config, _fields())
    assert "`region`   LowCardinality(String)" in sql
    with pytest.raises(DdlError, match=r"column missing: the records have no field 'missing'"):
        create_table_sql(_sink(columns=["order_id", "missing"]), _fields())
    with pytest.raises(DdlError, match="does not describe its records"):
        create_table_sql(_sink(columns=["order_id"]), None)


def _write_config(
    tmp_path: Path, deserializer: str, columns: str = "[order_id, region, ms, note]"
) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"""
pipeline: {{name: ddl}}
source:
  kafka: {{brokers: "127.0.0.1:1", topic: t, group_id: g}}
deserializer:
{deserializer}
sinks:
  orders:
    clickhouse:
      table: orders
      columns: {columns}
      shards: [{{replicas: ["http://127.0.0.1:1"]}}]
      table_options: {{order_by: [order_id], strings: low_cardinality}}
  other:
    clickhouse:
      table: other
      columns: [{{x: UInt8}}]
      shards: [{{replicas: ["http://127.0.0.1:1"]}}]
"""
    )
    return path


def _cli(*args: str) -> int:
    """``spate ARGS`` in-process; the command writes to sys.stdout / sys.stderr."""
    return main(list(args), stdout=io.StringIO(), stderr=io.StringIO())


def test_spate_schema_ddl_prints_each_clickhouse_sink(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    avro = f"  avro:\n    mode: raw\n    schema: {{inline: '{json.dumps(AVRO)}'}}"
    config = _write_config(tmp_path, avro)
    code = _cli("schema", "ddl", str(config))
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "-- sink orders\nCREATE TABLE IF NOT EXISTS `orders`\n(" in printed.out
    assert "`ms`       DateTime64(3, 'UTC')," in printed.out
    assert "`note`     LowCardinality(Nullable(String))" in printed.out
    assert "-- sink other\nCREATE TABLE IF NOT EXISTS `other`" in printed.out

    code = _cli("schema", "ddl", str(config), "--sink", "other")
    printed = capsys.readouterr()
    assert code == 0 and "orders" not in printed.out


def test_b88_spate_schema_ddl_prints_the_intent_table_under_effectively_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    avro = f"  avro:\n    mode: raw\n    schema: {{inline: '{json.dumps(AVRO)}'}}"
    config = _write_config(tmp_path, avro)
    config.write_text(
        config.read_text().replace("{name: ddl}", "{name: ddl, delivery: effectively_once}")
    )
    code = _cli("schema", "ddl", str(config))
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert printed.out.count("-- block intents") == 1  # one table for both sinks
    assert "CREATE TABLE IF NOT EXISTS `spate_block_intents` (`pipeline` String" in printed.out
    assert "ENGINE = ReplacingMergeTree" in printed.out


def test_b59_spate_schema_ddl_names_what_it_cannot_derive_b29(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    avro = f"  avro:\n    mode: raw\n    schema: {{inline: '{json.dumps(AVRO)}'}}"
    config = _write_config(tmp_path, avro, columns="[order_id, nope]")
    code = _cli("schema", "ddl", str(config))
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        "sinks.orders.clickhouse: column nope: the records have no field 'nope'; "
        "declare its type as {nope: Type}"
    )
    code = _cli("schema", "ddl", str(config), "--sink", "orderz")
    assert (
        code == 2 and "no ClickHouse sink 'orderz' (have: orders, other)" in capsys.readouterr().err
    )


def test_b62_spate_schema_ddl_finds_clickhouse_sinks_inside_tiered_and_tee(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ClickHouse sink nested in a ``tiered`` terminal or a ``tee`` branch (ADR 0005),
    at any depth, is printed under the name its component carries at run time."""
    avro = json.dumps(AVRO)
    shards = '[{replicas: ["http://127.0.0.1:1"]}]'
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"""
pipeline: {{name: ddl}}
source:
  kafka: {{brokers: "127.0.0.1:1", topic: t, group_id: g}}
deserializer:
  avro: {{mode: raw, schema: {{inline: '{avro}'}}}}
sinks:
  spooled:
    tiered:
      tiers: [{{memory: {{max_records: 10}}}}]
      terminal:
        clickhouse: {{table: orders, columns: [order_id, region], shards: {shards}}}
  both:
    tee:
      sinks:
        - clickhouse: {{table: copy_a, columns: [order_id], shards: {shards}}}
        - tiered:
            tiers: [{{memory: {{max_records: 10}}}}]
            terminal:
              clickhouse: {{table: copy_b, columns: [ms], shards: {shards}}}
"""
    )
    code = _cli("schema", "ddl", str(config))
    printed = capsys.readouterr()
    assert code == 0, printed.err
    headers = [line for line in printed.out.splitlines() if line.startswith("-- sink ")]
    assert headers == [
        "-- sink spooled.terminal",
        "-- sink both.0",
        "-- sink both.1.terminal",
    ]
    assert "-- sink both.1.terminal\nCREATE TABLE IF NOT EXISTS `copy_b`\n(\n" in printed.out
    assert "`ms` DateTime64(3, 'UTC')" in printed.out

    code = _cli("schema", "ddl", str(config), "--sink", "both.0")
    printed = capsys.readouterr()
    assert code == 0 and "copy_a" in printed.out and "orders" not in printed.out


def test_spate_schema_ddl_from_a_protobuf_descriptor_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    protos = Path(__file__).resolve().parents[3] / "examples" / "protos"
    descriptor_set = tmp_path / "orders.pb"
    subprocess.run(
        [
            "protoc",
            f"-I{protos}",
            "--include_imports",
            f"--descriptor_set_out={descriptor_set}",
            "storefront/v1/orders.proto",
        ],
        check=True,
    )
    proto = (
        f"  protobuf:\n    mode: raw\n    descriptor_set: {descriptor_set}\n"
        "    message: storefront.v1.OrderPlaced"
    )
    columns = "[order_id, customer_id, placed_at, channel, lines, labels, coupon]"
    code = _cli("schema", "ddl", str(_write_config(tmp_path, proto, columns)))
    out = capsys.readouterr().out
    assert code == 0
    for expected in (
        "`order_id`    Int64,",
        "`customer_id` Int32,",
        "`placed_at`   Nullable(DateTime64(6, 'UTC')),",
        "`channel`     Enum8('CHANNEL_UNSPECIFIED' = 0, 'WEB' = 1, 'APP' = 2, 'STORE' = 3),",
        "`lines`       Array(Tuple(`sku` LowCardinality(String), `qty` Int32, "
        "`unit_cents` Int32)),",
        "`labels`      Map(String, LowCardinality(String)),",
        "`coupon`      LowCardinality(Nullable(String))",
    ):
        assert expected in out, out


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize(
    "example",
    [
        "kafka_avro_to_clickhouse.yaml",
        "kafka_spool_clickhouse.yaml",
        "multi_table_split.yaml",
        "multi_table_split_orders.yaml",
    ],
)
def test_b158_spate_schema_ddl_prints_every_table_of_the_shipped_union_examples(
    example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A top-level union of Avro records describes one record type per sink: each sink's
    columns come from the branch that has them, computed columns are declared."""
    code = _cli("schema", "ddl", str(EXAMPLES / example))
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert printed.out.count("CREATE TABLE IF NOT EXISTS") >= 2
    if example == "kafka_avro_to_clickhouse.yaml":
        assert "-- sink orders (records of spate.datagen.OrderPlaced)" in printed.out
        assert "`placed_at`   DateTime64(3, 'UTC')," in printed.out
        assert "-- sink refunds (records of spate.datagen.RefundIssued)" in printed.out


def test_b158_spate_schema_ddl_on_a_union_names_the_branches_and_what_each_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    union = [
        {"type": "record", "name": "A", "fields": [{"name": "order_id", "type": "long"}]},
        {"type": "record", "name": "B", "fields": [{"name": "x", "type": "int"}]},
    ]
    avro = f"  avro:\n    mode: raw\n    schema: {{inline: '{json.dumps(union)}'}}"
    config = _write_config(tmp_path, avro, columns="[order_id, total]")
    code = _cli("schema", "ddl", str(config), "--sink", "orders")
    err = capsys.readouterr().err
    assert code == 2
    assert "union of 2 record types and none has every column" in err
    assert "A lacks total; B lacks order_id, total" in err
    assert "does not describe its records" not in err
