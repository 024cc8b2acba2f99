"""B92: several pipelines in one file (``pipelines:``), with shared top-level sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spate.config import load_config, load_configs, parse_configs
from spate.errors import ConfigError, MissingConnectorError

from .test_loader import _Models

TWO = """\
admin: {listen: "127.0.0.1:0"}
checkpoint: {interval: 2s, drain_timeout: 20s}
supervisor: {max_restarts: 3}
pipelines:
  - pipeline: {name: orders}
    source: {memory: {partitions: 2}}
    sink: {capture: {table: orders}}
  - pipeline: {name: payments}
    checkpoint: {interval: 500ms}
    supervisor: {max_restarts: 7}
    source: {memory: {}}
    sink:
      capture:
        table: payments
"""


def _parse(text: str, **kwargs: Any) -> list[Any]:
    return parse_configs(text, env={}, resolver=_Models(), file="many.yaml", **kwargs)


def test_b92_each_item_is_a_pipeline_with_the_shared_sections() -> None:
    orders, payments = _parse(TWO)
    assert (orders.name, orders.index, payments.name, payments.index) == (
        "orders",
        0,
        "payments",
        1,
    )
    # admin is shared as it is; the other shared sections are defaults an item overrides
    # key by key.
    assert orders.admin.listen == payments.admin.listen == "127.0.0.1:0"
    assert (orders.checkpoint.interval, orders.checkpoint.drain_timeout) == (2.0, 20.0)
    assert (payments.checkpoint.interval, payments.checkpoint.drain_timeout) == (0.5, 20.0)
    assert orders.supervisor is not None and orders.supervisor.max_restarts == 3
    assert payments.supervisor is not None and payments.supervisor.max_restarts == 7
    assert payments.sinks["sink"].config.table == "payments"
    # Connector paths name the item, for errors raised later by a factory.
    assert payments.sinks["sink"].path == "pipelines[1].sink.capture"


def test_b92_an_error_inside_an_item_names_it_by_index_and_line() -> None:
    text = TWO.replace("table: payments", "tabel: payments")
    with pytest.raises(ConfigError) as info:
        _parse(text)
    err = info.value
    assert err.path == "pipelines[1].sink.capture.tabel"
    assert (err.file, err.line) == ("many.yaml", 14)
    assert "did you mean 'table'?" in err.message


def test_b92_a_missing_connector_inside_an_item_names_it_by_index() -> None:
    text = TWO.replace("sink: {capture: {table: orders}}", "sink: {clickhouse: {}}")
    with pytest.raises(MissingConnectorError) as info:
        _parse(text)
    assert info.value.path == "pipelines[0].sink.clickhouse"
    assert info.value.line == 7


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        (
            TWO.replace("  - pipeline: {name: payments}", "  - pipeline: {name: orders}"),
            "pipelines[1].pipeline.name",
            "each pipeline of a file needs its own name",
        ),
        (
            TWO.replace("    checkpoint: {interval: 500ms}", "    admin: {listen: none}"),
            "pipelines[1].admin",
            "give it at the top level",
        ),
        ("source: {memory: {}}\n" + TWO, "source", "belongs in each item of pipelines"),
        ("pipelines: []\n", "pipelines", "non-empty list"),
        ("pipelines: [3]\n", "pipelines[0]", "expected a mapping"),
        (TWO.replace("interval: 2s,", "interval: 1ms,"), "checkpoint.interval", "at least"),
        (
            TWO.replace("supervisor: {max_restarts: 3}", "supervisor: {max_restart: 3}"),
            "supervisor.max_restart",
            "did you mean 'max_restarts'?",
        ),
    ],
)
def test_b92_list_mistakes_are_refused_with_their_path(text: str, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(text)
    assert info.value.path == path
    assert words in info.value.message


def test_b92_a_file_of_one_pipeline_is_a_list_of_one(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("source: {memory: {}}\nsink: {capture: {}}\n")
    (only,) = load_configs(path, env={}, resolver=_Models())
    assert only.index is None
    assert only == load_config(path, env={}, resolver=_Models())


def test_b92_load_config_refuses_a_file_of_several_pipelines(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(TWO)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={}, resolver=_Models())
    assert info.value.path == "pipelines"
    assert "defines several pipelines" in info.value.message
