"""``spate`` as a child process for end-to-end tests, its stderr in a file.

The log goes to a file rather than a pipe, so a chatty run can never fill a pipe and
block; :attr:`SpateRun.text` reads what it logged so far.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path


class SpateRun:
    """``python -m spate.cli *argv`` started in ``tmp`` (with ``env`` if given)."""

    def __init__(self, tmp: Path, *argv: str, env: Mapping[str, str] | None = None) -> None:
        self.log = tmp / f"run-{len(list(tmp.glob('run-*.log')))}.log"
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "spate.cli", *argv],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=tmp,
                env=None if env is None else dict(env),
            )

    @property
    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def sigterm(self) -> int:
        """Send SIGTERM and wait for the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def kill_if_running(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"spate run did not exit; log: {self.text[-3000:]}") from None

    def until(
        self, predicate: Callable[[], object], what: str, timeout: float = 120, every: float = 0.1
    ) -> None:
        """Wait for ``predicate``; fail when the run exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"waiting for {what}; log: {self.text[-3000:]}")
            time.sleep(every)
