"""``bench/chain_overhead.py`` runs and reports what DESIGN §12 asks for (smoke test).

Only the shape of the report is checked, at a tiny size: benchmarks are never timed
assertions in tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_chain_overhead_bench_reports_medians_ratio_and_rss() -> None:
    env = {**os.environ, "SPATE_BENCH_RECORDS": "3000", "SPATE_BENCH_RUNS": "3"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "chain_overhead.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0].startswith("records: 3000 ")
    assert "rows written: 2250" in lines[0]
    assert any(line.startswith("framework: median ") for line in lines)
    assert any(line.startswith("baseline: median ") for line in lines)
    ratio = [line for line in lines if line.startswith("ratio: ")]
    assert len(ratio) == 1 and float(ratio[0].split()[1]) > 0
    assert any(line.startswith("peak_rss_mib: ") for line in lines)
