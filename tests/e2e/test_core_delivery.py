"""Multi-process delivery scenarios of the core runtime without infrastructure.

A pipeline process reads a :class:`~spate.testing.SequenceSource` (its commits survive the
process in an offsets file) and writes to the fsynced :class:`~spate.testing.FileSink`.
The assertion is docs/development.md's: every record reaches the file at least once, and at every
sampled moment the committed offsets never exceed what the file holds (B1, B14, B16).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spate.testing import read_file_sink, read_offsets, sequence_payload

from tests.support.scale import scaled

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).with_name("sequence_pipeline.py")
ROOT = Path(__file__).resolve().parents[2]


class _Proc:
    """A pipeline process whose output goes to files (no pipe can fill up and block it)."""

    def __init__(self, offsets: Path, out: Path, *extra: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        tag = f"{len(list(offsets.parent.glob('proc-*.out')))}"
        self.stdout_path = offsets.parent / f"proc-{tag}.out"
        self.stderr_path = offsets.parent / f"proc-{tag}.err"
        with open(self.stdout_path, "w") as so, open(self.stderr_path, "w") as se:
            self.popen = subprocess.Popen(
                [sys.executable, str(SCRIPT), "--offsets", str(offsets), "--out", str(out), *extra],
                stdout=so,
                stderr=se,
                env=env,
            )

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def send_signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()[-3000:]

    def report(self) -> dict[str, object]:
        lines = self.stdout_path.read_text().strip().splitlines()
        assert lines, self.stderr
        result: dict[str, object] = json.loads(lines[-1])
        return result


def _start(offsets: Path, out: Path, *extra: str) -> _Proc:
    return _Proc(offsets, out, *extra)


def _check_commits_covered(offsets: Path, out: Path, partitions: int) -> dict[int, int]:
    """Read the committed offsets first, then the file: everything below must be there."""
    committed = read_offsets(offsets)
    present = {row for row in read_file_sink(out) if isinstance(row, str)}
    for partition, upto in committed.items():
        missing = [o for o in range(upto) if sequence_payload("seq", partition, o) not in present]
        assert not missing, f"partition {partition} committed {upto} but misses {missing[:5]}"
    return committed


def test_b1_kill_9_mid_run_then_restart_delivers_everything_at_least_once(tmp_path) -> None:
    offsets, out = tmp_path / "offsets.json", tmp_path / "out.jsonl"
    partitions, records = 3, scaled(20_000, minimum=1500)
    # Pace the source so one run lasts about three seconds at any scale: long enough to
    # be killed part-way, short enough for the suite.
    pace = 3.0 / (records / 50)
    args = (
        "--partitions",
        str(partitions),
        "--records",
        str(records),
        "--batch",
        "50",
        "--pace",
        f"{pace:.4f}",
        "--interval",
        "0.1",
    )
    proc = _start(offsets, out, *args)
    samples = 0
    deadline = time.monotonic() + 60
    try:
        # Sample while it runs; kill once something is committed but not everything.
        while time.monotonic() < deadline:
            committed = _check_commits_covered(offsets, out, partitions)
            samples += 1
            if committed and sum(committed.values()) >= partitions * records // 4:
                break
            assert proc.poll() is None, proc.stderr
            time.sleep(0.02)
        else:
            raise AssertionError("the pipeline committed nothing within 60 s")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.popen.kill()
        proc.wait(timeout=30)
    assert proc.popen.returncode == -signal.SIGKILL
    at_kill = _check_commits_covered(offsets, out, partitions)
    assert sum(at_kill.values()) < partitions * records  # it really died mid-run

    restarted = _start(offsets, out, *args)
    while restarted.poll() is None:
        _check_commits_covered(offsets, out, partitions)
        samples += 1
        time.sleep(0.02)
    assert restarted.wait(timeout=60) == 0, restarted.stderr
    report = restarted.report()
    assert report["state"] == "completed"
    # The restart resumed from the commit, not from the start.
    assert isinstance(report["records_in"], int)
    assert report["records_in"] <= partitions * records - sum(at_kill.values())
    final = _check_commits_covered(offsets, out, partitions)
    assert final == {p: records for p in range(partitions)}
    rows = read_file_sink(out)
    expected = {sequence_payload("seq", p, o) for p in range(partitions) for o in range(records)}
    assert expected <= set(rows)  # at least once
    assert samples > 5


def test_b14_b16_sigterm_with_a_stuck_sink_exits_1_within_drain_timeout(tmp_path) -> None:
    offsets, out = tmp_path / "offsets.json", tmp_path / "out.jsonl"
    drain_timeout = 1.5
    proc = _start(
        offsets,
        out,
        "--partitions",
        "2",
        "--records",
        "100000",
        "--batch",
        "20",
        "--pace",
        "0.001",
        "--interval",
        "0.1",
        "--drain-timeout",
        str(drain_timeout),
        "--stuck-after",
        "3",
    )
    try:
        # Wait until the sink is stuck: its three good writes are in the file.
        deadline = time.monotonic() + 30
        while len(read_file_sink(out)) < 60 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr
            time.sleep(0.02)
        time.sleep(0.3)  # the backlog fills up behind the stuck write
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=drain_timeout + 30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.popen.kill()
            proc.wait(timeout=30)
    assert code == 1, proc.stderr
    assert took < drain_timeout + 1.0, f"exit took {took:.2f}s"
    report = proc.report()
    assert report["state"] == "failed" and report["abandoned_rows"] > 0
    committed = _check_commits_covered(offsets, out, 2)
    assert sum(committed.values()) <= 60  # nothing past the stuck batch
