"""The test kit's plugin factories build working components from YAML-shaped config."""

from __future__ import annotations

import pytest
from spate.config import decode
from spate.errors import ConfigError
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.pipeline import Pipeline
from spate.plugins import BuildContext, ComponentFactory
from spate.testing import (
    ManualClock,
    capture_sink_factory,
    file_sink_factory,
    memory_source_factory,
    read_file_sink,
    sequence_source_factory,
)


def _context(component: str, budget: InflightBudget, clock: ManualClock) -> BuildContext:
    return BuildContext(
        pipeline="factories",
        component=component,
        meter=Meter("factories"),
        clock=clock,
        run_nonce="n1",
        budget=budget,
    )


def test_factories_have_the_plugin_shape() -> None:
    for factory in (
        memory_source_factory,
        sequence_source_factory,
        capture_sink_factory,
        file_sink_factory,
    ):
        assert isinstance(factory, ComponentFactory)


def test_memory_source_and_file_sink_from_config_run_a_pipeline(tmp_path) -> None:
    clock = ManualClock()
    budget = InflightBudget(1 << 20)
    src_cfg = decode(
        memory_source_factory.config_model,
        {"partitions": 2, "records": 30, "payloads": ["extra"], "batch_size": "7"},
        "source.memory",
    )
    sink_cfg = decode(
        file_sink_factory.config_model,
        {"path": str(tmp_path / "out.jsonl"), "max_rows": 10, "threaded": False},
        "sink.file",
    )
    source = memory_source_factory.build(src_cfg, _context("source", budget, clock))
    sink = file_sink_factory.build(sink_cfg, _context("out", budget, clock))
    report = Pipeline(
        "factories",
        source,
        {"out": sink},
        clock=clock,
        budget=budget,
        handle_signals=False,
    ).run()
    assert report.exit_code == 0
    assert report.records_in == 61
    rows = read_file_sink(tmp_path / "out.jsonl")
    assert len(rows) == 61
    assert budget.used == 0


def test_factory_configs_refuse_bad_values_with_their_path() -> None:
    with pytest.raises(ConfigError, match=r"source\.memory\.partitions"):
        decode(memory_source_factory.config_model, {"partitions": 0}, "source.memory")
    with pytest.raises(ConfigError, match=r"sink\.capture\.max_rowz"):
        decode(capture_sink_factory.config_model, {"max_rowz": 1}, "sink.capture")
