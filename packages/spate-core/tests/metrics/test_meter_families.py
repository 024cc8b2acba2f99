"""B23: every family is declared on a pipeline's own registry; per-lane gauges go to 0."""

from __future__ import annotations

import re

from prometheus_client import generate_latest
from spate.metrics import ALL_FAMILIES, BASE_LABELS, LaneGauges, Meter, names
from spate.metrics.names import COORDINATION_FAMILIES, PIPELINE_FAMILIES

_NAME = re.compile(r"^spate_[a-z0-9_]+$")
_UNITS = ("_seconds", "_bytes", "_rows", "_records", "_batches", "_splits", "_workers")


def _value(meter: Meter, name: str, **labels: str) -> float | None:
    value = meter.registry.get_sample_value(name, labels)
    return None if value is None else float(value)


def test_b23_family_names_follow_the_conventions() -> None:
    seen: set[str] = set()
    for family in ALL_FAMILIES:
        assert _NAME.match(family.name), family.name
        assert family.name not in seen, f"{family.name} declared twice"
        seen.add(family.name)
        if family.kind == "counter":
            assert family.name.endswith("_total"), family.name
        else:
            assert not family.name.endswith("_total"), family.name
        if family.kind == "histogram":
            assert family.name.endswith("_seconds"), family.name
        assert not set(family.labels) & set(BASE_LABELS), family.name
        assert family.help.strip(), family.name
    # Sanity: the sections of docs/guides/monitoring.md are all present.
    prefixes = {f.name.split("_")[1] for f in ALL_FAMILIES}
    assert {"source", "deser", "operator", "backpressure", "sink", "checkpoint"} <= prefixes
    assert "coordination" in prefixes
    gauges = [f for f in ALL_FAMILIES if f.kind == "gauge"]
    assert any(f.name.endswith(_UNITS) for f in gauges)


def test_b23_a_new_meter_declares_every_pipeline_family_on_its_own_registry() -> None:
    first, second = Meter("one"), Meter("two")
    assert first.registry is not second.registry
    text = generate_latest(first.registry).decode()
    for family in PIPELINE_FAMILIES:
        assert f"# TYPE {family.name} {family.kind}" in text, family.name
    # Families that cannot apply (coordination without a coordination section) are out.
    assert COORDINATION_FAMILIES and "spate_coordination_" not in text
    everything = generate_latest(Meter("all", declare=ALL_FAMILIES).registry).decode()
    for family in ALL_FAMILIES:
        assert f"# TYPE {family.name} {family.kind}" in everything, family.name
    lazy = Meter("lazy", declare=None)
    assert "spate_" not in generate_latest(lazy.registry).decode()


def test_b23_series_carry_pipeline_component_and_family_labels() -> None:
    meter = Meter("labels-test")
    meter.counter(
        names.SINK_RETRIES, component="payments", component_type="clickhouse", shard="0"
    ).inc(3)
    assert (
        _value(
            meter,
            "spate_sink_retries_total",
            pipeline="labels-test",
            component="payments",
            component_type="clickhouse",
            shard="0",
        )
        == 3.0
    )


def test_b23_lag_goes_to_zero_when_a_lane_is_no_longer_owned() -> None:
    meter = Meter("lag-test")
    lag = LaneGauges(meter, names.SOURCE_LAG, component="source", component_type="kafka")
    lag.set("orders[0]", 120)
    lag.set("orders[1]", 7)
    labels = {"pipeline": "lag-test", "component": "source", "component_type": "kafka"}
    assert _value(meter, "spate_source_lag_records", lane="orders[0]", **labels) == 120
    lag.disown(["orders[0]"])
    assert _value(meter, "spate_source_lag_records", lane="orders[0]", **labels) == 0
    assert _value(meter, "spate_source_lag_records", lane="orders[1]", **labels) == 7
    assert lag.owned() == {"orders[1]"}
    lag.set("orders[2]", 5)
    lag.retain_only(["orders[2]"])
    assert _value(meter, "spate_source_lag_records", lane="orders[1]", **labels) == 0
    assert _value(meter, "spate_source_lag_records", lane="orders[2]", **labels) == 5
    assert lag.owned() == {"orders[2]"}


def test_lane_gauges_refuse_families_not_keyed_by_lane() -> None:
    meter = Meter("refuse-test")
    try:
        LaneGauges(meter, names.SINK_INFLIGHT, component="s", component_type="t")
    except ValueError as exc:
        assert "lane" in str(exc)
    else:
        raise AssertionError("a shard-keyed gauge was accepted")


def test_b23_every_declared_family_is_recorded_somewhere() -> None:
    """A family no component records would be documented and exported but always empty."""
    from pathlib import Path

    packages = Path(__file__).resolve().parents[3]
    sources = "\n".join(
        path.read_text(encoding="utf-8")
        for path in packages.glob("*/src/**/*.py")
        if path.name != "names.py"
    )
    constants = {
        attr: family
        for attr, family in vars(names).items()
        if isinstance(family, names.MetricFamily)
    }
    assert set(constants.values()) == set(ALL_FAMILIES)
    unused = [
        family.name for attr, family in constants.items() if not re.search(rf"\b{attr}\b", sources)
    ]
    assert unused == []
