"""The deduplication window under effectively once is sized against a ``kill -9`` (B123):
a killed member's partitions are replayed only after its session times out, while every
partition writing the table keeps sealing blocks. Assembly only; nothing connects."""

from __future__ import annotations

import logging

import pytest
from spate.config import parse_config
from spate.errors import ConfigError
from spate.pipeline._builder import assemble
from spate.plugins import default_registry


def _config(window: int, interval: str) -> str:
    return f"""\
pipeline: {{name: window, delivery: effectively_once}}
admin: {{listen: none}}
checkpoint: {{interval: {interval}}}
source:
  kafka: {{brokers: "127.0.0.1:1", topic: t, group_id: g}}
sink:
  clickhouse:
    table: events
    columns: [id]
    shards: [{{replicas: ["http://127.0.0.1:1"]}}]
    table_options: {{dedup_window: {window}}}
"""


def test_b123_a_window_smaller_than_one_partitions_blocks_across_a_kill_is_refused() -> None:
    config = parse_config(_config(20, "1s"), env={}, resolver=default_registry())
    with pytest.raises(ConfigError) as raised:
        assemble(config, handle_signals=False)
    message = str(raised.value)
    assert "sink.clickhouse.table_options.dedup_window" in message
    assert "61 blocks per partition" in message and "session timeout 45s" in message


def test_b123_the_partitions_a_window_covers_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    config = parse_config(_config(1000, "5s"), env={}, resolver=default_registry())
    with caplog.at_level(logging.INFO, logger="spate._assembly"):
        assembly = assemble(config, handle_signals=False)
    try:
        assert "= 1000 holds the blocks of up to 76 partition(s)" in caplog.text
    finally:
        for sink in assembly.pipeline.sinks.values():
            sink.close()


def test_b345_the_sink_learns_the_blocks_a_partition_writes_before_a_replay() -> None:
    """The blocks B123 counts reach the ClickHouse sink, which sizes each block's share
    of the table's window in parts by them (B345)."""
    config = parse_config(_config(1000, "5s"), env={}, resolver=default_registry())
    assembly = assemble(config, handle_signals=False)
    try:
        (sink,) = assembly.pipeline.sinks.values()
        assert sink._connector.replay_blocks == 13  # ceil((5 + 5 + 45 + 10) / 5)
    finally:
        for sink in assembly.pipeline.sinks.values():
            sink.close()
