"""A 3-minute soak of the flagship under injected network faults (``make test-full`` only).

The same run as ``make soak`` (``tests/soak/soak.py``), shortened: faults every 30 s
for 10 s each (a Kafka partition longer than the session timeout, a latency spike, a
blackholed ClickHouse, 503s on inserts, resets after an insert ran, resets during a
commit). It asserts what the soak report shows: every event in ClickHouse exactly once
after ``FINAL``, no sampler violation (B1), a clean drain (B14) and flat series — the
second half's peak RSS, open file descriptors and threads within a tolerance of the
first half's. Nothing about how fast it went.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak.soak import flatness, run_soak, write_report
from tests.support.scale import current_scale

pytestmark = [
    pytest.mark.integration,
    pytest.mark.e2e,
    pytest.mark.skipif(current_scale() < 1, reason="the soak runs in make test-full only"),
]


@pytest.mark.timeout(2400)
def test_b1_b14_a_three_minute_soak_under_faults_stays_flat_and_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """B1, B14: three minutes at 100 events/s with six faults; exact counts, no
    violation, exit 0 on SIGTERM, flat RSS, fds and threads."""
    result = run_soak(3, 100, tmp_path, fault_every=30, fault_for=10)
    summary = write_report(result, tmp_path / "report", "tests/soak/test_soak.py").read_text()
    assert result.exact, summary
    assert result.samples > 10, summary
    assert result.violations == 0, summary
    assert result.exit_code == 0, summary
    assert len(result.faults) >= 5, summary
    assert len(result.points) >= 12, summary
    assert not flatness(result.points).problems(), summary
    assert result.proxy_stats["kafka"]["swallowed"] > 0, summary
    assert result.proxy_stats["clickhouse"]["cuts"] > 0, summary
