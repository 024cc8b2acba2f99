"""B27: core's built-ins are plugins like any other — listed, and usable from YAML."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spate.plugins import Registry
from spate.testing import read_file_sink
from spate.testing._factories import json_line

from tests.support.scale import scaled


def test_b27_builtins_are_declared_by_spate_core() -> None:
    core = {(p.name, p.kind) for p in Registry().plugins() if p.distribution == "spate-core"}
    assert {("memory", "source"), ("capture", "sink"), ("file", "sink")} <= core


def test_b16_spate_run_memory_to_file_through_the_console_entry_point(tmp_path: Path) -> None:
    records = scaled(5_000, minimum=100)
    out = tmp_path / "out.jsonl"
    config = tmp_path / "memory.yaml"
    config.write_text(
        f"""\
pipeline: {{name: builtin-run}}
checkpoint: {{interval: 100ms}}
admin: {{listen: "127.0.0.1:0"}}
source:
  memory: {{partitions: 3, records: {records}, batch_size: 250}}
sink:
  file: {{path: "{out}", max_rows: 500}}
""",
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "run", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = read_file_sink(out)
    assert sorted(rows) == sorted(f"{p}:{i}" for p in range(3) for i in range(records))
    assert "admin server listening on 127.0.0.1:" in result.stderr
    assert "builtin-run completed" in result.stderr


def test_json_line_writes_undecoded_payloads_as_text() -> None:
    assert json_line(b"a:1") == b'"a:1"\n'
    assert json_line({"k": b"v", "n": 1}) == b'{"k":"v","n":1}\n'
    assert json_line(("x", 2)) == b'["x",2]\n'
