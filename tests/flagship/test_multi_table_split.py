"""examples/multi_table_split.py runs the seed-shaped YAML into payments and refunds, and
its variant adds order lines flattened into their own table (B2, B3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scale import scaled

RUNNER = Path(__file__).with_name("_split_runner.py")


@pytest.mark.parametrize("with_orders", [False, True], ids=["two-tables", "with-order-lines"])
def test_split_example_fills_each_table(tmp_path: Path, with_orders: bool) -> None:
    args = [sys.executable, str(RUNNER), str(tmp_path / "ch"), str(scaled(20_000, minimum=2_000))]
    if with_orders:
        args.append("--with-orders")
    result = subprocess.run(args, capture_output=True, text=True, timeout=400, check=False)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["exit"] == 0
    assert summary["counts"] == summary["expected"]
    assert set(summary["counts"]) == (
        {"payments", "refunds", "order_lines"} if with_orders else {"payments", "refunds"}
    )
