"""The Python form reports a failed start as the ``spate`` command does: spate's own
error with its one line, not screens of chained library tracebacks (the chain goes to
the DEBUG log)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CONFIG = """\
pipeline: {name: pyform}
admin: {listen: none}
source:
  kafka: {brokers: "127.0.0.1:1", topic: t, group_id: g, startup_timeout: 1s}
deserializer:
  json: {}
sink:
  clickhouse:
    table: t
    columns: [a]
    shards: [{replicas: ["http://127.0.0.1:2"]}]
"""


def _run(tmp_path: Path, config: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "p.yaml"
    path.write_text(config)
    script = textwrap.dedent(
        f"""
        from spate import Pipeline, load_config
        Pipeline.from_config(load_config({str(path)!r})).run()
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )


def test_an_unreachable_endpoint_raises_spates_error_on_a_few_lines(tmp_path: Path) -> None:
    run = _run(tmp_path, CONFIG)
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert lines[-1].startswith(
        "spate.errors.SinkError: sink clickhouse: shard 0 replica http://127.0.0.1:2:"
    ), run.stderr
    assert len(lines) < 12, run.stderr  # was 132 lines of chained tracebacks
    assert "direct cause" not in run.stderr
    assert "Unexpected Http Driver Exception" not in run.stderr


def test_a_configuration_error_names_the_key_on_a_few_lines(tmp_path: Path) -> None:
    run = _run(tmp_path, CONFIG.replace("columns: [a]", "columns: [a]\n    nope: 1"))
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert "spate.errors.ConfigError:" in lines[-1] and "sink.clickhouse.nope" in lines[-1]
    assert len(lines) < 12, run.stderr
