"""``examples/memory_pipeline.py`` runs without infrastructure and exits 0 (B16)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_memory_example_exits_0_and_prints_counts_and_watermarks() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "memory_pipeline.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "records in: 6000" in result.stdout
    assert "rows out: payments=5400 refunds=600" in result.stdout
    assert "committed orders[2]: 2000" in result.stdout
