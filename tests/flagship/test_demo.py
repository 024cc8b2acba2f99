"""`make demo` at a small size: the flagship on embedded defaults and on the local
services prints matching counts and exits 0 (B14, B16)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.avro_native import needs_avro_columnar
from tests.support.scale import scaled

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "scripts" / "demo.py"


def run_demo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BROKERS", "CLICKHOUSE_URL")}
    return subprocess.run(
        [sys.executable, str(DEMO), "--count", str(scaled(100_000, minimum=3_000)), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**clean, **(env or {}), "SPATE_ADMIN_LISTEN": "none"},
        check=False,
    )


@pytest.mark.parametrize("path", ["row", pytest.param("columnar", marks=needs_avro_columnar)])
def test_demo_on_embedded_defaults_prints_matching_counts(path: str) -> None:
    result = run_demo("--embedded", "--path", path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert f"path:       {path}" in result.stdout
    assert "librdkafka mock cluster" in result.stdout
    assert "chdb://" in result.stdout
    assert "OK: every table holds exactly the events produced" in result.stdout


@pytest.mark.integration
def test_demo_on_the_local_broker_and_http_front(kafka_bootstrap: str, clickhouse_url: str) -> None:
    result = run_demo(env={"KAFKA_BROKERS": kafka_bootstrap, "CLICKHOUSE_URL": clickhouse_url})
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert kafka_bootstrap in result.stdout
    assert clickhouse_url in result.stdout
    assert "OK: every table holds exactly the events produced" in result.stdout


def test_a_mismatch_on_the_mock_cluster_says_it_dropped_the_events() -> None:
    """A large ``make demo`` on the mock cluster: the events the mock dropped are named as
    such (with the fix), not blamed on the tables."""
    spec = importlib.util.spec_from_file_location("spate_demo_script", DEMO)
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    line = demo.mismatch(1_000_000, 660_000, mock=True)
    assert "mock cluster kept only 660,000 of the 1,000,000" in line
    assert "make services-up" in line and "tables" not in line
    assert demo.mismatch(1_000, 1_000, mock=True).endswith("do not hold what was produced")
    assert demo.mismatch(1_000, 900, mock=False).endswith("do not hold what was produced")
