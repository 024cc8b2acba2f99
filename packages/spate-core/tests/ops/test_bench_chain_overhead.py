"""``bench/chain_overhead.py`` runs and reports what the performance rules ask for
(smoke test; see docs/development.md).

Only the shape of the report is checked, at a tiny size: benchmarks are never timed
assertions in tests.
"""

from __future__ import annotations

from tests.support.bench import run_bench


def test_chain_overhead_bench_reports_medians_ratio_and_rss() -> None:
    lines = run_bench("chain_overhead.py", 3000)
    assert lines[0].startswith("records: 3000 ")
    assert "rows written: 2250" in lines[0]
    assert any(line.startswith("framework: median ") for line in lines)
    assert any(line.startswith("baseline: median ") for line in lines)
    ratio = [line for line in lines if line.startswith("ratio: ")]
    assert len(ratio) == 1 and float(ratio[0].split()[1]) > 0
    assert any(line.startswith("peak_rss_mib: ") for line in lines)
