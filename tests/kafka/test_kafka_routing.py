"""Templated routing on the real broker and the ClickHouse HTTP front over chDB (ADR 0024).

One topic, a YAML pipeline whose ClickHouse sink names its table by a field
(``events_{kind}``) and its database by a header (``tenant_{$header.tenant}``): every
target is created on first use (B291) — tens at the smallest scale, hundreds at full
scale — with fewer open targets allowed than there are (B293); each target holds exactly
its records (B290); records whose target cannot be named (a kind that is not an
identifier, no tenant header) reach the dead-letter topic as read (B292). The row path
(a source batch's rows at once, B95, or row by row under ``effectively_once``, B295) and
the columnar path (B296) write the same.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from spate import Pipeline, load_config

from tests.kafka._pipeline import source_yaml
from tests.support.columnar_run import watch_columnar
from tests.support.scale import scaled
from tests.support.services import consume, create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration


def _unroutable(i: int) -> bool:
    return i % 37 == 5 or i % 53 == 7


def _kind(i: int, kinds: int) -> str:
    return "bad kind" if i % 37 == 5 else f"k{i % kinds}"


def _tenant(i: int, tenants: int, prefix: str) -> bytes | None:
    return None if i % 53 == 7 else b"%s%d" % (prefix.encode(), (i // 3) % tenants)


def _target(i: int, kinds: int, tenants: int, prefix: str) -> tuple[str, str]:
    tenant = _tenant(i, tenants, prefix)
    assert tenant is not None
    return f"tenant_{tenant.decode()}", f"events_{_kind(i, kinds)}"


@pytest.mark.parametrize(
    "path", ["rows", "columnar", "rows-effectively-once", "columnar-effectively-once"]
)
def test_b290_one_topic_routed_by_field_and_header_to_many_tables_and_databases_b291_b292(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path, path: str
) -> None:
    import clickhouse_connect

    if path.startswith("columnar"):
        pytest.importorskip("polars")
    delivery = "effectively_once" if path.endswith("effectively-once") else "at_least_once"
    # Effectively once is read from a plain MergeTree without FINAL: each record once.
    engine = "MergeTree" if delivery == "effectively_once" else "ReplacingMergeTree"
    final = "" if delivery == "effectively_once" else "FINAL"
    topic, dlq = unique_name("route"), unique_name("route-dlq")
    prefix = unique_name("t").replace("-", "")[:10] + "_"
    create_topic(kafka_bootstrap, topic, 2)
    create_topic(kafka_bootstrap, dlq, 1)
    kinds, tenants = scaled(20, minimum=4), scaled(10, minimum=3)
    count = scaled(3000, minimum=300)

    def value(i: int) -> bytes:
        return json.dumps({"id": i, "kind": _kind(i, kinds), "amount": i / 4}).encode()

    def headers(i: int) -> list[tuple[str, bytes | None]] | None:
        tenant = _tenant(i, tenants, prefix)
        return None if tenant is None else [("tenant", tenant)]

    produce_keyed(kafka_bootstrap, topic, count, value=value, headers=headers)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"""
pipeline: {{name: {unique_name("route")}, delivery: {delivery}}}
admin: {{listen: none}}
{source_yaml(kafka_bootstrap, topic, unique_name("g"), json_values=True)}
sink:
  clickhouse:
    database: "tenant_{{$header.tenant}}"
    table: "events_{{kind}}"
    columns:
      - {{id: Int64}}
      - {{kind: String}}
      - {{amount: Float64}}
      - {{tenant: $header.tenant}}
    shards: [{{replicas: ["{clickhouse_url}"]}}]
    create_table: if_missing
    max_targets: 16
    table_options: {{order_by: [id], engine: {engine}}}
    batch: {{linger: 100ms}}
    on_record_error: dead_letter
dead_letter:
  sink: {{kafka: {{brokers: "{kafka_bootstrap}", topic: {dlq}}}}}
"""
    )
    with watch_columnar() as seen:
        pipeline = Pipeline.from_config(load_config(config), handle_signals=False)
        if path.startswith("rows"):
            pipeline = pipeline.chains(lambda ctx: ctx.chain())
        report = pipeline.run()
    assert report.exit_code == 0, report.summary()
    assert seen.columnar is path.startswith("columnar")

    expected = Counter(
        _target(i, kinds, tenants, prefix) for i in range(count) if not _unroutable(i)
    )
    assert len(expected) >= 12
    parts = urlsplit(clickhouse_url)
    client = clickhouse_connect.get_client(host=parts.hostname, port=parts.port)
    found = client.query(
        "SELECT database, name FROM system.tables WHERE database LIKE {p:String}",
        parameters={"p": f"tenant_{prefix}%"},
    ).result_rows
    assert sorted(found) == sorted(expected)
    for (database, table), n in expected.items():
        ids = client.query(f"SELECT id FROM {database}.{table} {final} ORDER BY id").result_rows
        assert len(ids) == n, f"{database}.{table}"
        for (i,) in ids:
            assert _target(i, kinds, tenants, prefix) == (database, table)
    letters = consume(kafka_bootstrap, dlq, unique_name("g"), count - sum(expected.values()))
    assert sorted(r.value for r in letters) == sorted(
        value(i) for i in range(count) if _unroutable(i)
    )
