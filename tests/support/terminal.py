"""Running the ``spate`` CLI on a pseudo-terminal, as a user at a terminal would."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_on_a_terminal(
    config: Path, env: Mapping[str, str] | None = None, timeout: float = 120
) -> tuple[int, str]:
    """``spate run config`` with stdout and stderr on a pseudo-terminal; (exit code, output)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spate.cli", "run", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env={**os.environ, **(env or {}), "COLUMNS": "120", "TERM": "xterm"},
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
    return proc.wait(timeout=timeout), b"".join(chunks).decode("utf-8", "replace")
