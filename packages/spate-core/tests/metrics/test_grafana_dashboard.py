"""The Grafana dashboard in docs/grafana/spate.json queries only documented families,
and covers each part of the pipeline (B23)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from spate.metrics import ALL_FAMILIES

ROOT = Path(__file__).resolve().parents[4]
DASHBOARD = ROOT / "docs" / "grafana" / "spate.json"
GUIDE = ROOT / "docs" / "guides" / "monitoring.md"
_METRIC = re.compile(r"\bspate_[a-z0-9_]+")
_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def _queries(dashboard: dict[str, Any]) -> list[str]:
    queries = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["definition"])
    return queries


def _family(series: str) -> str:
    histograms = {f.name for f in ALL_FAMILIES if f.kind == "histogram"}
    for suffix in _HISTOGRAM_SERIES:
        base = series.removesuffix(suffix)
        if base != series and base in histograms:
            return base
    return series


def test_b23_the_dashboard_queries_only_documented_families() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    guide = GUIDE.read_text(encoding="utf-8")
    declared = {f.name for f in ALL_FAMILIES}
    used = {_family(name) for query in _queries(dashboard) for name in _METRIC.findall(query)}
    assert used, "the dashboard queries nothing"
    assert used <= declared, sorted(used - declared)
    for name in used:
        assert f"| `{name}` |" in guide, f"{name} is not in the monitoring guide"
    # Every panel is filtered by the pipeline variable and reads the chosen data source.
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert 'pipeline=~"$pipeline"' in target["expr"], panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_dashboard_has_a_row_per_part_of_the_pipeline_and_unique_panel_ids() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == [
        "Throughput",
        "Lag and commits",
        "Drops and errors",
        "Backpressure",
        "Sinks",
        "ClickHouse tables",
    ]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    guide = GUIDE.read_text(encoding="utf-8")
    assert "(../grafana/spate.json)" in guide
    for row in rows:
        assert f"| {row} |" in guide, row


PANELLED = (
    "spate_sink_late_rows_total",
    "spate_sink_partition_inserts_total",
    "spate_sink_table_active_parts",
    "spate_sink_table_pressure",
    "spate_sink_batch_max_rows",
    "spate_sink_insert_wait_seconds_total",
    "spate_sink_server_rejected_rows_total",
    "spate_sink_isolate_inserts_total",
)
"""Families that must each have a panel, named in the guide's row of that panel: late
data and partition cuts (B330), the table's health and the rows the server refused (B332)."""


def _rows_of_panels(dashboard: dict[str, Any]) -> dict[str, set[str]]:
    """Row title -> the families its panels query (a panel belongs to the row above it)."""
    rows: dict[str, set[str]] = {}
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            rows[row] = set()
            continue
        for target in panel.get("targets", []):
            rows[row].update(_family(name) for name in _METRIC.findall(target["expr"]))
    return rows


def test_b330_b332_sink_and_table_health_families_have_panels_the_guide_names() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    guide = GUIDE.read_text(encoding="utf-8")
    rows = _rows_of_panels(dashboard)
    for family in PANELLED:
        holding = [row for row, families in rows.items() if family in families]
        assert holding, f"no panel queries {family}"
        for row in holding:
            line = next(x for x in guide.splitlines() if x.startswith(f"| {row} |"))
            assert f"`{family}`" in line, f"the guide's {row} row does not name {family}"
