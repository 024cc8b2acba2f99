"""The ``clickhouse:`` section: the seed example, defaults, refusals (B17, B19, B29)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spate import load_config
from spate.config import decode
from spate.errors import ConfigError, ErrorPolicy
from spate_clickhouse import ClickHouseSinkConfig, parse_type

REPO = Path(__file__).resolve().parents[3]
PATH = "sinks.payments.clickhouse"


def _decode(**body: Any) -> ClickHouseSinkConfig:
    base: dict[str, Any] = {
        "table": "payments",
        "columns": ["order_id", "amount_cents"],
        "shards": [{"replicas": ["http://127.0.0.1:8123"]}],
    }
    base.update(body)
    return decode(ClickHouseSinkConfig, base, PATH)


def _error(**body: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _decode(**body)
    return info.value


def test_seed_example_sinks_load_with_their_keys_and_values() -> None:
    cfg = load_config(REPO / "examples" / "multi_table_split.yaml", env={})
    payments = cfg.sinks["payments"].config
    refunds = cfg.sinks["refunds"].config
    assert isinstance(payments, ClickHouseSinkConfig)
    assert isinstance(refunds, ClickHouseSinkConfig)
    assert payments.table == "payments"
    assert payments.columns == ("order_id", "amount_cents")
    assert refunds.columns == ("order_id", "amount_cents", "reason")
    assert payments.format == "native"
    assert payments.validate_schema == "full"
    assert payments.shards[0].replicas == ("http://localhost:8123",)
    assert payments.user == "default" and payments.password == ""
    assert payments.batch.max_rows == 500_000
    assert payments.batch.max_bytes == 128 * 1024 * 1024
    assert payments.batch.linger == 1.0 and refunds.batch.linger == 5.0
    assert payments.inflight.max_per_shard == 2


def test_defaults_apply() -> None:
    cfg = _decode()
    assert cfg.compression == "lz4"
    assert cfg.validate_schema == "names"
    assert cfg.router == "key"
    assert cfg.timeouts.connect == 10.0 and cfg.timeouts.send_receive == 300.0
    assert cfg.on_record_error is ErrorPolicy.FAIL
    assert cfg.database_name == "" and cfg.table_name == "payments"


def test_b17_unknown_key_is_refused_with_its_dotted_path() -> None:
    assert _error(batch={"max_rowz": 5}).path == f"{PATH}.batch.max_rowz"
    assert _error(compresion="lz4").path == f"{PATH}.compresion"
    assert _error(timeouts={"read": "5s"}).path == f"{PATH}.timeouts.read"


@pytest.mark.parametrize(
    "key", ["insert_deduplication_token", "insert_deduplicate", "wait_end_of_query"]
)
def test_b19_framework_owned_settings_are_refused(key: str) -> None:
    error = _error(settings={key: 1, "insert_quorum": 2})
    assert error.path == f"{PATH}.settings.{key}"
    assert "set by spate" in error.message


def test_passthrough_settings_are_kept_and_booleans_sent_as_numbers() -> None:
    cfg = _decode(settings={"insert_quorum": 2, "optimize_on_insert": False})
    assert cfg.insert_settings() == {"insert_quorum": 2, "optimize_on_insert": 0}


def test_async_insert_without_waiting_is_refused() -> None:
    error = _error(settings={"async_insert": 1, "wait_for_async_insert": 0})
    assert error.path == f"{PATH}.settings.wait_for_async_insert"
    assert "at-least-once" in error.message
    assert _decode(settings={"async_insert": 1}).settings["async_insert"] == 1


def test_duplicate_columns_are_refused() -> None:
    error = _error(columns=["a", "b", "a"])
    assert error.path == f"{PATH}.columns[2]" and "twice" in error.message


def test_typed_columns_declare_types_and_bad_types_are_refused() -> None:
    cfg = _decode(columns=["order_id", {"amount": "Decimal32(2)"}, {"at": "DateTime64(3)"}])
    specs = cfg.column_specs
    assert [s.name for s in specs] == ["order_id", "amount", "at"]
    assert specs[0].type is None
    assert specs[1].type == parse_type("Decimal(9, 2)")
    assert str(specs[2].type) == "DateTime64(3)"
    assert _error(columns=["a", {"b": "Array(Int32"}]).path == f"{PATH}.columns[1]"
    assert _error(columns=[]).path == f"{PATH}.columns"


def test_table_with_database_prefix() -> None:
    cfg = _decode(table="analytics.payments")
    assert (cfg.database_name, cfg.table_name) == ("analytics", "payments")
    assert _decode(table="payments", database="analytics").database_name == "analytics"
    assert _error(table="a.payments", database="b").path == f"{PATH}.database"
    assert _error(table="a.b.c").path == f"{PATH}.table"
    assert _error(table="").path == f"{PATH}.table"


def test_format_compression_and_validate_schema_are_closed_sets() -> None:
    assert _error(format="rowbinary").path == f"{PATH}.format"
    assert _error(compression="gzip").path == f"{PATH}.compression"
    assert _decode(compression="none").compression == "none"
    assert _decode(validate_schema=False).validate_schema == "off"  # YAML reads `off` as false
    assert _error(validate_schema="types").path == f"{PATH}.validate_schema"


def test_replica_urls_are_checked() -> None:
    bad = _error(shards=[{"replicas": ["tcp://h:9000"]}])
    assert bad.path == f"{PATH}.shards[0].replicas[0]"
    assert _error(shards=[{"replicas": ["http://h:8123/db?x=1"]}]).path.endswith("replicas[0]")
    assert _error(shards=[]).path == f"{PATH}.shards"
    assert _error(shards=[{"replicas": ["http://a:1", "http://a:1"]}]).path.endswith("replicas")


def test_one_chdb_directory_per_sink() -> None:
    ok = _decode(shards=[{"replicas": ["chdb://./data/ch"]}])
    assert ok.shards[0].replicas == ("chdb://./data/ch",)
    error = _error(shards=[{"replicas": ["chdb:///tmp/a"]}, {"replicas": ["chdb:///tmp/b"]}])
    assert error.path == f"{PATH}.shards" and "one engine per process" in error.message


def test_distributed_router_needs_a_valid_sharding_key_on_a_column() -> None:
    cfg = _decode(router="distributed", sharding_key="xxHash64(order_id)")
    assert cfg.sharding == ("xxHash64", "order_id")
    assert _decode(router="distributed", sharding_key="order_id").sharding == ("", "order_id")
    assert _error(router="distributed").path == f"{PATH}.sharding_key"
    assert "not one of" in _error(router="distributed", sharding_key="xxHash64(nope)").message
    assert _error(router="distributed", sharding_key="rand()").path == f"{PATH}.sharding_key"
    assert _error(sharding_key="order_id").message == "only used with router: distributed"


def test_pool_keys_are_validated_by_the_pool_models() -> None:
    assert _error(inflight={"max_per_shard": 0}).path == f"{PATH}.inflight.max_per_shard"
    assert _error(retry={"jitter": 1.5}).path == f"{PATH}.retry.jitter"
    assert _decode(on_record_error="skip").on_record_error is ErrorPolicy.SKIP
    assert _decode(timeouts={"send_receive": "2s"}).timeouts.send_receive == 2.0
    assert _error(timeouts={"connect": "0s"}).path == f"{PATH}.timeouts.connect"
