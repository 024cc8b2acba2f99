"""Fresh virtual environments for install tests: run a command, build wheels.

Install tests (the front door's extras, a third-party connector) build wheels of this
repository's distributions and install them into new environments, the way a user
would. Third-party dependencies come from the package index.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest


def run(
    cmd: list[str], *, cwd: Path, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` outside this project's environment; fail the test with its output."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    return proc


def build_wheels(out: Path, distributions: Iterable[Path]) -> list[Path]:
    """Wheels of ``distributions`` into ``out`` (no dependencies, hatchling from here)."""
    dirs = [str(d) for d in distributions]
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            *dirs,
        ],
        cwd=out,
    )
    return sorted(out.glob("*.whl"))
