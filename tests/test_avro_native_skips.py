"""Without spate-avro-native the tests of the columnar Avro path skip, saying why (B210).

On a machine without cargo the bootstrap leaves the Rust extension out (B137), and
``make test`` must still pass: every test that decodes Avro as columns is marked through
``tests/support/avro_native.py`` and skips with spate-avro's own reason. The extension is
hidden from a pytest run in a child process (``sys.modules["spate_avro_native"] = None``
makes both ``find_spec`` and ``import`` miss it), which runs a sample of those tests at
every level they are marked at: a module importing the extension, a module-wide mark, one
parameter of a test, and single tests beside others that still run. A source check keeps
new tests on the shared marker instead of probing ``jetliner`` (installed without cargo
too) or repeating the reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HIDDEN = (
    "import sys; sys.modules['spate_avro_native'] = None; import pytest; "
    "sys.exit(pytest.main(sys.argv[1:]))"
)

SAMPLE = [
    "packages/spate-avro-native/tests/test_native.py",
    "packages/spate-avro/tests/test_scan.py",
    "packages/spate-avro/tests/test_columnar.py",
    "packages/spate-parquet/tests/test_bench_parquet_sink.py::"
    "test_parquet_sink_bench_reports_medians_ratio_and_rss[args2]",
    "tests/flagship/test_demo.py::test_demo_on_embedded_defaults_prints_matching_counts[columnar]",
    "tests/clickhouse/test_columnar_equivalence.py::"
    "test_b87_an_avro_map_stores_the_same_map_on_both_paths",
    "tests/kafka/test_kafka_dead_letter.py::"
    "test_columnar_bad_records_reach_the_dead_letter_topic_b71_b148",
    "tests/test_connector_modules.py::"
    "test_every_distribution_exports_its_names_and_version[spate-avro-native-spate_avro_native]",
]


def test_b210_without_the_extension_the_columnar_avro_tests_skip_naming_why() -> None:
    run = subprocess.run(
        [sys.executable, "-c", HIDDEN, "-q", "-rs", "-p", "no:cacheprovider", *SAMPLE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    summary = out.strip().splitlines()[-1]
    assert re.match(r"\d+ skipped in ", summary), summary  # nothing passed, failed or erred
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    counted = sum(int(m[1]) for line in skipped if (m := re.match(r"SKIPPED \[(\d+)\]", line)))
    assert counted == int(summary.split()[0]) >= len(SAMPLE), out[-4000:]
    for line in skipped:
        assert "spate-avro-native not installed" in line and "cargo" in line, line


def _test_sources() -> list[Path]:
    found = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("packages/*/tests/**/*.py")]
    return [p for p in found if p.name != Path(__file__).name and ".venv" not in p.parts]


def test_b210_tests_of_the_columnar_avro_path_use_the_shared_marker() -> None:
    """``jetliner`` and ``polars`` are installed without cargo: probing them does not
    tell whether Avro decodes as columns; only the shared marker does."""
    probing = [
        str(p.relative_to(ROOT))
        for p in _test_sources()
        if re.search(r"importorskip\(\s*\"jetliner\"", p.read_text())
    ]
    assert probing == [], "use tests.support.avro_native instead: " + ", ".join(probing)
    own_reason = [
        str(p.relative_to(ROOT))
        for p in _test_sources()
        if "importorskip(" in (text := p.read_text())
        and re.search(r"importorskip\(\s*\"spate_avro_native\"", text)
        and "reason=SKIP_REASON" not in text
    ]
    assert own_reason == [], "skip with tests.support.avro_native's SKIP_REASON: " + ", ".join(
        own_reason
    )
