"""Templated targets (ADR 0024): templates bound to the sink's columns (B290), refused
with their dotted path, the open targets bounded (B293), and the row and columnar paths
naming the same target, or the same reason, for every row (B296)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate.cli._main import main
from spate.config import decode
from spate.errors import ConfigError, ErrorClass, SinkError
from spate_clickhouse._targets import OpenTargets, TargetPlan
from spate_clickhouse.config import ClickHouseSinkConfig

PATH = "sinks.events.clickhouse"
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "multi_tenant.yaml"
COLUMNS: list[Any] = [{"id": "Int64"}, {"kind": "String"}, {"tenant": "$header.tenant"}]


def _decode(**body: Any) -> ClickHouseSinkConfig:
    base: dict[str, Any] = {
        "table": "events_{kind}",
        "database": "tenant_{$header.tenant}",
        "columns": COLUMNS,
        "shards": [{"replicas": ["http://127.0.0.1:8123"]}],
    }
    base.update(body)
    return decode(ClickHouseSinkConfig, base, PATH)


def _plan(cfg: ClickHouseSinkConfig | None = None) -> TargetPlan:
    cfg = cfg or _decode()
    return TargetPlan(cfg.database, cfg.table, cfg.column_specs)


def test_b290_templates_bind_fields_and_metadata_columns() -> None:
    cfg = _decode()
    assert cfg.templated
    assert cfg.fixed_database == ""
    plan = _plan(cfg)
    assert plan.target((1, "click", b"acme")) == ("tenant_acme", "events_click")
    assert plan.row_values({"id": 1, "kind": "view", "tenant": "t1"})[1:] == ["view", "t1"]
    fixed = _decode(database="analytics")
    assert fixed.fixed_database == "analytics"
    assert _plan(fixed).target((1, "x", None)) == ("analytics", "events_x")


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("table", "events_{knd}", "is not one of the sink's columns"),
        ("database", "tenant_{$header.org}", "add {<column>: $header.org} to columns"),
        ("database", "tenant_{$offsett}", "unknown record metadata"),
        ("table", "events_{kind", "unbalanced braces"),
    ],
)
def test_b290_a_placeholder_that_names_no_column_is_refused_with_its_path(
    key: str, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _decode(**{key: text})
    assert info.value.path == f"{PATH}.{key}"
    assert message in info.value.message


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ({"evolve": "add_columns"}, "evolve"),
        ({"health": {"follow_parts": True}}, "health"),
        ({"late_data": {"after": "7d", "to": "side"}}, "late_data"),
    ],
)
def test_b290_settings_that_need_one_table_are_refused_with_a_template(
    body: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _decode(**body)
    assert info.value.path.startswith(f"{PATH}.{key}")
    assert "templated table" in info.value.message


def test_b290_spate_validate_checks_the_templates_of_the_multi_tenant_example(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    assert main(["validate", str(EXAMPLE)], stdout=out, stderr=io.StringIO()) == 0
    bad = tmp_path / "pipeline.yaml"
    bad.write_text(EXAMPLE.read_text().replace("{$header.tenant}", "{$header.org}"))
    stderr = io.StringIO()
    assert main(["validate", str(bad)], stdout=io.StringIO(), stderr=stderr) == 2
    assert "sink.clickhouse.database: {$header.org} needs a metadata column" in stderr.getvalue()


def test_b293_open_targets_forget_the_least_recently_used() -> None:
    made: list[tuple[str, ...]] = []
    targets = OpenTargets(2)
    for name in ["a", "b", "a", "c", "a", "b"]:
        targets.use((name,), lambda name=name: made.append((name,)))
    # "b" was the least recently used when "c" came, and is made ready again.
    assert made == [("a",), ("b",), ("c",), ("b",)]
    assert len(targets) == 2


def test_b292_a_target_that_cannot_be_named_is_a_record_error_naming_why() -> None:
    plan = _plan()
    for values, reason in [
        ((1, "a b", b"t"), "not a valid name"),
        ((1, None, b"t"), "{kind} has no value (missing)"),
        ((1, "x", b"\xff"), "{$header.tenant} has no value (bytes that is not UTF-8)"),
        ((1, "9" * 200, b"t"), "not a valid name"),
    ]:
        with pytest.raises(SinkError) as info:
            plan.target(values)
        assert info.value.error_class is ErrorClass.RECORD
        assert reason in info.value.reason


_VALUES = st.one_of(
    st.none(),
    st.sampled_from(["a", "b", "c_1", "bad name", "", "9lives"]),
)
_HEADERS = st.one_of(st.none(), st.sampled_from([b"t1", b"t2", b"\xff", b"x-y", b""]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_VALUES, _HEADERS), max_size=40))
def test_b296_row_and_columnar_paths_route_every_row_identically(
    rows: list[tuple[str | None, bytes | None]],
) -> None:
    import pyarrow as pa

    plan = _plan()
    expected: list[tuple[str, str] | str] = []
    for i, (kind, tenant) in enumerate(rows):
        try:
            expected.append(plan.target(plan.row_values({"id": i, "kind": kind, "tenant": tenant})))
        except SinkError as exc:
            expected.append(exc.reason)
    table = pa.table(
        {
            "id": pa.array(range(len(rows)), pa.int64()),
            "kind": pa.array([k for k, _ in rows], pa.string()),
            "tenant": pa.array([t for _, t in rows], pa.binary()),
        }
    )
    columnar: list[tuple[str, str] | str | None] = [None] * len(rows)
    for position, reason in plan.refused(table):
        columnar[position] = reason
    good = [i for i, r in enumerate(columnar) if r is None]
    kept = table.take(pa.array(good, pa.int64()))
    for target, indices in plan.group_table(kept):
        for index in indices:
            columnar[good[int(index)]] = target
    assert columnar == expected
    # The row path's buffer (encoded columns) splits its rows the same way.
    data = [[i for i in good], [rows[i][0] for i in good], [rows[i][1] for i in good]]
    assert plan.targets_of_columns(data, len(good)) == [expected[i] for i in good]


def test_b291_spate_schema_ddl_shows_the_statement_each_target_is_created_with(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "ddl", str(EXAMPLE)]) == 0
    text = capsys.readouterr().out
    assert "one table per target: {placeholders} filled from each row" in text
    assert "`tenant`       Nullable(String)" in text
