"""``bench/deser.py`` runs and reports what the performance rules ask for (smoke test,
tiny size; see docs/development.md).

Only the shape of the report is checked: benchmarks are never timed assertions in tests.
"""

from __future__ import annotations

import importlib.util

from tests.support.avro_native import AVRO_COLUMNAR
from tests.support.bench import run_bench


def test_deser_bench_reports_a_ratio_for_avro_json_and_protobuf() -> None:
    lines = run_bench("deser.py", 2500)
    assert lines[0].startswith("2,500 storefront events (2,500 distinct)")
    titles = [line.split(":")[0] for line in lines if line.startswith("== ")]
    polars = importlib.util.find_spec("polars") is not None
    json_columnar = polars and importlib.util.find_spec("pyarrow") is not None
    protobuf_columnar = polars and importlib.util.find_spec("ptars") is not None
    expected = [
        "== avro",
        *(["== avro columnar"] if AVRO_COLUMNAR else []),
        "== json",
        *(["== json columnar", "== json columnar into columns"] if json_columnar else []),
        "== protobuf",
        *(["== protobuf columnar"] if protobuf_columnar else []),
    ]
    assert titles == expected
    sides = len(expected)
    assert sum(line.startswith("framework: 2,500 records, median ") for line in lines) == sides
    assert sum(line.startswith("baseline: 2,500 records, median ") for line in lines) == sides
    ratios = [float(line.split()[1]) for line in lines if line.startswith("ratio: ")]
    assert len(ratios) == sides and all(r > 0 for r in ratios)
    assert sum(line.startswith("peak RSS: ") for line in lines) == sides
