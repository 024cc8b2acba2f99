"""A deliberately broken sink fails the conformance suite with a message naming the promise.

The same JSON-lines connector passes the whole sink suite when honest, so every failure
below comes from the breakage, not from the harness (B2, B9).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from spate.testing.conformance import ConformanceFailure, SinkConformance

from tests.sdk.broken_sinks import (
    DoubleReleaseSuite,
    ForgetfulSuite,
    HonestSuite,
    LyingSuite,
    NoDedupSuite,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def _tests(suite: type[SinkConformance]) -> list[str]:
    return sorted(name for name in dir(suite) if name.startswith("test_"))


def _run_one(suite: type[SinkConformance], name: str) -> None:
    instance = suite()
    instance.setup_method()
    try:
        test: Callable[[], None] = getattr(instance, name)
        test()
    finally:
        instance.teardown_method()


@pytest.mark.parametrize("name", _tests(HonestSuite))
def test_the_honest_connector_passes_every_sink_test(name: str) -> None:
    _run_one(HonestSuite, name)  # a test that does not apply is reported as skipped


@pytest.mark.parametrize(
    "name",
    [
        "test_b2_delivered_acks_mean_rows_in_the_destination",
        "test_b2_write_returns_only_once_rows_are_durable",
        "test_b9_a_retry_resends_the_same_batch",
    ],
)
def test_b2_a_sink_that_reports_success_without_writing_fails_naming_b2(name: str) -> None:
    with pytest.raises(ConformanceFailure) as info:
        _run_one(LyingSuite, name)
    assert info.value.promise.code in ("B2", "B9")
    assert str(info.value).startswith(f"{info.value.promise.code} broken (")
    if name.startswith("test_b2"):
        assert str(info.value).startswith("B2 broken (a sink reports rows written")


def test_b9_a_writer_that_empties_the_buffer_fails_naming_b9() -> None:
    with pytest.raises(ConformanceFailure, match=r"^B9 broken .*emptied the buffer"):
        _run_one(ForgetfulSuite, "test_b2_write_returns_only_once_rows_are_durable")


def test_b9_a_sink_claiming_dedup_that_writes_a_retry_twice_fails_naming_b9() -> None:
    with pytest.raises(ConformanceFailure, match=r"^B9 broken .*landed twice"):
        _run_one(NoDedupSuite, "test_b9_a_retry_resends_the_same_batch")


def test_b2_the_suite_run_by_pytest_reports_the_broken_promise() -> None:
    """What a connector author sees: pytest fails, and the report names B2."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/sdk/lying_sink_suite.py",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "B2 broken (a sink reports rows written" in proc.stdout, proc.stdout[-3000:]
    assert "failed" in proc.stdout.splitlines()[-1], proc.stdout[-500:]


def test_b39_a_sink_that_releases_an_ack_twice_fails_naming_b39() -> None:
    """The token knows its holders, so a second release is caught even when the sink
    swallows the error it raises."""
    with pytest.raises(ConformanceFailure, match=r"^B39 broken \(a sink releases each ack"):
        _run_one(DoubleReleaseSuite, "test_b39_each_holder_releases_an_ack_once")
    with pytest.raises(ConformanceFailure, match=r"released by sink jsonl-twice buffer"):
        _run_one(DoubleReleaseSuite, "test_b2_delivered_acks_mean_rows_in_the_destination")
