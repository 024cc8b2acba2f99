"""The progress bar of ``spate run`` on a terminal (rich, optional) for a source with a
known end; nothing changes off a terminal or without rich."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from spate.cli._progress import _Tracker, progress_bar
from spate.metrics import Meter
from spate.testing import memory_source


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "bounded.yaml"
    config.write_text(
        "pipeline: {name: bar}\n"
        "admin: {listen: none}\n"
        "source: {memory: {partitions: 2, records: 200000, batch_size: 50}}\n"
        "sink: {capture: {}}\n",
        encoding="utf-8",
    )
    return config


def _run_on_a_terminal(config: Path) -> tuple[int, str]:
    """``spate run`` with stdout and stderr on a pseudo-terminal; (exit code, output)."""
    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS="120", TERM="xterm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "spate.cli", "run", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


def test_a_bounded_run_on_a_terminal_draws_a_progress_bar(tmp_path: Path) -> None:
    code, output = _run_on_a_terminal(_config(tmp_path))
    assert code == 0, output
    assert "records" in output and "━" in output, output[-2000:]  # rich's bar
    # Against a known end: "done/total" counts and, at the end, 100%.
    assert re.search(r"\d+/\d+", output), output[-2000:]
    assert "100%" in output, output[-2000:]
    # Log lines still reach the terminal, above the bar.
    assert "pipeline bar completed" in output
    assert "delivered=400000" in output


def test_off_a_terminal_only_log_lines_are_written(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "run", str(_config(tmp_path))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "━" not in result.stderr
    assert all(line.startswith("ts=") for line in result.stderr.splitlines())


def test_without_rich_the_run_goes_on_without_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setitem(sys.modules, "rich.console", None)  # as if not installed
    source, _ = memory_source({0: [b"a"]})
    stream = Terminal()
    ran = False
    with progress_bar(source, Meter("m"), stream, logging.StreamHandler(stream)):
        ran = True
    assert ran and stream.getvalue() == ""


def test_the_tracker_counts_against_handed_out_plus_remaining() -> None:
    readings = iter([(0, None), (10, 100), (30, 80), (40, 90), (130, 0), (140, 0)])
    current: list[tuple[int, int | None]] = []

    def step() -> tuple[int, int | None]:
        current[:] = [next(readings)]
        return current[0]

    tracker = _Tracker(lambda: current[0][1], lambda: step()[0])
    seen = [tracker.read() for _ in range(6)]
    # The total never shrinks; done never passes it.
    assert seen == [(0, None), (10, 110), (30, 110), (40, 130), (130, 130), (140, 140)]
