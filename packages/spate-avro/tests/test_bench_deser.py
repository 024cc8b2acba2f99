"""``bench/deser.py`` runs and reports what DESIGN §12 asks for (smoke test, tiny size).

Only the shape of the report is checked: benchmarks are never timed assertions in tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_deser_bench_reports_a_ratio_for_avro_and_json() -> None:
    env = {**os.environ, "SPATE_BENCH_RECORDS": "2500", "SPATE_BENCH_RUNS": "3"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "deser.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0].startswith("2,500 storefront events (2,500 distinct)")
    titles = [line for line in lines if line.startswith("== ")]
    assert [t.split(":")[0] for t in titles] == ["== avro", "== json"]
    assert sum(line.startswith("framework: 2,500 records, median ") for line in lines) == 2
    assert sum(line.startswith("baseline: 2,500 records, median ") for line in lines) == 2
    ratios = [float(line.split()[1]) for line in lines if line.startswith("ratio: ")]
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
    assert sum(line.startswith("peak RSS: ") for line in lines) == 2
