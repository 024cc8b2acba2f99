"""B129: ``orphans: delete`` needs one writer per table, so it is refused, naming its key,
before any worker starts under ``spate run --processes N`` (or ``pipeline.processes``)
and with ``gate: coordination``; one process still runs with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from spate.config import decode
from spate.errors import ConfigError
from spate_parquet import ParquetSinkConfig

from tests.support.cli_run import SpateRun

pytestmark = pytest.mark.e2e

CONFIG = """
pipeline: {{name: lake, processes: {processes}}}
admin: {{listen: none}}
source:
  memory: {{partitions: 2, payloads: ['{{"id": 1}}', '{{"id": 2}}']}}
deserializer:
  json: {{}}
sink:
  parquet: {{path: "{root}", publish: manifest, table: t, orphans: {orphans}}}
"""


def _config(tmp: Path, *, processes: int = 1, orphans: str = "delete") -> Path:
    path = tmp / f"lake-{processes}-{orphans}.yaml"
    path.write_text(CONFIG.format(processes=processes, root=tmp / "lake", orphans=orphans))
    return path


@pytest.mark.parametrize("how", ["--processes", "pipeline.processes"])
def test_b129_orphans_delete_is_refused_for_several_worker_processes(
    tmp_path: Path, how: str
) -> None:
    if how == "--processes":
        run = SpateRun(tmp_path, "run", "--processes", "2", str(_config(tmp_path)))
    else:
        run = SpateRun(tmp_path, "run", str(_config(tmp_path, processes=2)))
    assert run.wait() == 2, run.text[-3000:]
    last = run.text.strip().splitlines()[-1]
    assert "sink.parquet.orphans: delete needs one writer per table" in last, last
    assert "2 worker processes" in last
    assert "starting 2 worker processes" not in run.text, "a worker was started"
    assert not (tmp_path / "lake").exists(), "a worker touched the table"


def test_b129_validate_refuses_orphans_delete_for_several_processes(tmp_path: Path) -> None:
    check = subprocess.run(
        [sys.executable, "-m", "spate.cli", "validate", str(_config(tmp_path, processes=2))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 2, check.stdout + check.stderr
    assert "sink.parquet.orphans: delete needs one writer per table" in check.stderr


def test_b129_one_process_runs_with_orphans_delete(tmp_path: Path) -> None:
    run = SpateRun(tmp_path, "run", "--processes", "1", str(_config(tmp_path)))
    assert run.wait() == 0, run.text[-3000:]
    pointer = json.loads((tmp_path / "lake" / "t.parts" / "_manifest.json").read_bytes())
    assert pointer["total_rows"] == 4


def test_b129_orphans_delete_is_refused_with_the_coordination_gate() -> None:
    body = {"path": "/x", "publish": "manifest", "table": "t", "orphans": "delete"}
    decode(ParquetSinkConfig, body, "sink.parquet")  # one local writer: fine
    with pytest.raises(ConfigError, match=r"sink\.parquet\.orphans: delete needs one writer"):
        decode(ParquetSinkConfig, {**body, "gate": "coordination"}, "sink.parquet")
