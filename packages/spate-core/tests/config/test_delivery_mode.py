"""``pipeline.delivery`` (B90): effectively once is refused, with one line, where the
sinks cannot record block intents; at least once stays the default."""

from __future__ import annotations

from pathlib import Path

import pytest
from spate.config import parse_config
from spate.errors import ConfigError
from spate.pipeline._builder import assemble


def _config(out: Path, delivery: str) -> str:
    return f"""\
pipeline: {{name: delivery, delivery: {delivery}}}
admin: {{listen: none}}
source: {{memory: {{records: 2}}}}
sink: {{file: {{path: "{out}"}}}}
"""


def test_b90_effectively_once_refuses_a_sink_without_intents(tmp_path: Path) -> None:
    cfg = parse_config(_config(tmp_path / "out.jsonl", "effectively_once"), env={})
    with pytest.raises(ConfigError) as raised:
        assemble(cfg, handle_signals=False)
    message = str(raised.value)
    assert "pipeline.delivery" in message
    assert "effectively_once needs ClickHouse sinks; sink " in message
    assert "\n" not in message


def test_at_least_once_is_the_default_and_builds_any_sink(tmp_path: Path) -> None:
    cfg = parse_config(_config(tmp_path / "out.jsonl", "at_least_once"), env={})
    assert cfg.pipeline.delivery == "at_least_once"
    assemble(cfg, handle_signals=False)


def test_an_unknown_delivery_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pipeline\.delivery"):
        parse_config(_config(tmp_path / "out.jsonl", "exactly_once"), env={})
