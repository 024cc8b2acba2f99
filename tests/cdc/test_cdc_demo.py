"""`make demo-cdc` at a small size on the local services: the source table, the replacing
table after ``FINAL`` and the collapsing table collapsed by its sign print the same row
count and checksum, and the demo exits 0; a difference is a MISMATCH (B413)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cdc import CdcServices
from tests.support.no_loss import load_example
from tests.support.scale import scaled

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "scripts" / "demo_cdc.py"


@pytest.mark.integration
def test_b413_the_cdc_demo_prints_matching_counts_and_checksums(
    cdc_services: CdcServices, clickhouse_url: str
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(DEMO),
            "--rows",
            str(scaled(2000, minimum=200)),
            "--changes",
            str(scaled(4000, minimum=400)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CLICKHOUSE_URL": clickhouse_url, "SPATE_ADMIN_LISTEN": "none"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    sides = re.findall(
        r"^(PostgreSQL|ClickHouse) .*?(\d+) rows  checksum (\w+)$", result.stdout, re.M
    )
    assert len(sides) == 3, result.stdout
    assert len({(count, digest) for _, count, digest in sides}) == 1, result.stdout
    assert int(sides[0][1]) > 0
    assert result.stdout.rstrip().endswith("MATCH")
    assert "MISMATCH" not in result.stdout


def test_b413_a_difference_or_a_sign_sum_outside_0_to_1_is_a_mismatch() -> None:
    demo = load_example(DEMO)
    rows = [(1, "a", 1, True, None), (2, "b", 2, False, "n")]
    lines, same = demo.verdict({"source": rows, "replacing": rows, "collapsing": rows}, (0, 1))
    assert same and lines[-1] == "MATCH"
    _, same = demo.verdict({"source": rows, "replacing": rows[:1], "collapsing": rows}, (0, 1))
    assert not same
    _, same = demo.verdict({"source": rows, "replacing": rows, "collapsing": rows}, (0, 2))
    assert not same
    lines, same = demo.verdict({"source": rows, "replacing": rows, "collapsing": rows}, (-1, 1))
    assert not same and lines[-1] == "MISMATCH"
