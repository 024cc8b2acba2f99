"""``bench/parquet_sink.py`` runs and reports medians, the ratio and peak RSS (smoke test).

Only the shape of the report is checked, at a tiny size: benchmarks are never timed
assertions in tests.
"""

from __future__ import annotations

import pytest

from tests.support.avro_native import needs_avro_columnar
from tests.support.bench import run_bench


@pytest.mark.parametrize(
    "args", [(), ("--per-row",), pytest.param(("--columnar",), marks=needs_avro_columnar)]
)
def test_parquet_sink_bench_reports_medians_ratio_and_rss(args: tuple[str, ...]) -> None:
    lines = run_bench("parquet_sink.py", 3000, 3, *args)
    assert lines[0].startswith("3,000 rows, files of ")
    assert any(line.startswith("framework: 3,000 records, median ") for line in lines)
    assert any(line.startswith("baseline: 3,000 records, median ") for line in lines)
    ratio = [line for line in lines if line.startswith("ratio: ")]
    assert len(ratio) == 1 and float(ratio[0].split()[1]) > 0
    assert any(line.startswith("peak RSS: ") for line in lines)
