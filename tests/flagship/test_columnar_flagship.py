"""The flagship on the columnar path writes exactly what the row path writes (B2, B3, B28).

Both run in their own process (one chDB directory per process) on the same events with
corrupt payloads among them: the tables must hold identical rows and the deserializer
and operator counters must be identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.avro_native import needs_avro_columnar

pytestmark = needs_avro_columnar

RUNNER = Path(__file__).with_name("_columnar_runner.py")
SCALE = float(os.environ.get("SPATE_TEST_SCALE", "1"))


def run(path: str, directory: Path, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RUNNER), str(directory), str(count), path],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_columnar_flagship_matches_the_row_path_with_corrupt_payloads(tmp_path: Path) -> None:
    """B28: the same bad records skipped and counted; B3: every batch resolves delivered."""
    count = max(int(20_000 * SCALE), 2_000)
    row = run("row", tmp_path / "row", count)
    col = run("columnar", tmp_path / "columnar", count)
    row_out, _ = row.communicate(timeout=600)
    col_out, _ = col.communicate(timeout=600)
    assert row.returncode == 0 and col.returncode == 0
    row_report = json.loads(row_out.strip().splitlines()[-1])
    col_report = json.loads(col_out.strip().splitlines()[-1])
    assert col_report["exit"] == 0
    assert col_report["records_in"] == count + 7
    assert col_report["delivered"] == col_report["records_in"]
    assert col_report["tables"] == row_report["tables"]
    assert col_report["counters"] == row_report["counters"]
    skipped = [v for k, v in col_report["counters"].items() if "outcome=skipped" in k]
    assert skipped == [7.0]


def test_a_pipeline_without_a_chain_runs_columnar_when_the_extra_is_installed(
    tmp_path: Path,
) -> None:
    """Decoded columns map to sink columns by name; a bad payload is skipped (B28)."""
    result = subprocess.run(
        [sys.executable, str(RUNNER.with_name("_nochain_runner.py")), str(tmp_path / "ch"), "500"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["exit"] == 0
    assert report["columnar"] is True
    assert report["rows"] == [[i, 7 * i, None if i % 3 else f"n{i}"] for i in range(500)]
