"""Smoke runs of the benchmark scripts at a tiny size.

Tests only check the shape of a benchmark's report (medians, ``ratio:``, peak RSS):
benchmarks are never timed assertions in tests (docs/development.md, performance rules).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_bench(script: str, records: int, runs: int = 3, *args: str) -> list[str]:
    """Run ``bench/<script> [args]`` on ``records`` records; return its report's lines."""
    env = {**os.environ, "SPATE_BENCH_RECORDS": str(records), "SPATE_BENCH_RUNS": str(runs)}
    out = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    return out.splitlines()
