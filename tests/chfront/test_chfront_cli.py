"""The front's command line, as ``scripts/services.sh`` runs it, fails clearly on bad input.

B29 in spirit for the test infrastructure: a front that cannot start says why in one line
naming the address, and exits non-zero at once instead of hanging the fixture or the
services script.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.chfront_fixtures import REPO_ROOT

pytestmark = pytest.mark.integration


def run_front(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.support.chfront", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_busy_port_exits_1_naming_the_address(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_front("--port", str(port), "--data-dir", str(tmp_path / "replica"))
    assert done.returncode == 1
    assert f"cannot listen on http://127.0.0.1:{port}" in done.stderr


def test_bad_arguments_exit_2_with_usage() -> None:
    missing = run_front("--port", "18123")
    assert missing.returncode == 2 and "--data-dir" in missing.stderr
    out_of_range = run_front("--port", "70000", "--data-dir", "unused")
    assert out_of_range.returncode == 2 and "--port must be within" in out_of_range.stderr
