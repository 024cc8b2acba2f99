"""``scripts/bootstrap.sh`` on a machine with Python alone (B137's first step).

The bootstrap's plan (``SPATE_BOOTSTRAP_PLAN=1`` prints what it would install and exits)
is checked in a scratch checkout with and without a ``cargo`` on the PATH: without one,
spate-avro-native (the Rust extension only the columnar Avro path needs) is left out and
the rest of the Avro columnar extra installed on its own, instead of refusing to set
anything up; maturin is never allowed to fetch a toolchain by itself; with cargo, the
extension is built as before.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _plan(tmp_path: Path, *, cargo: bool) -> subprocess.CompletedProcess[str]:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", checkout / "scripts" / "bootstrap.sh")
    for name in ("spate-core", "spate-avro", "spate-avro-native", "spate-json"):
        (checkout / "packages" / name).mkdir(parents=True)
    shutil.copy(
        ROOT / "packages" / "spate-avro" / "pyproject.toml",
        checkout / "packages" / "spate-avro" / "pyproject.toml",
    )
    tools = tmp_path / "tools"
    tools.mkdir()
    # Only what the script calls: a Python >= 3.11 and the shell's utilities.
    (tools / "python3").symlink_to(sys.executable)
    for tool in ("sha256sum", "cut", "cat", "dirname"):
        found = shutil.which(tool)
        assert found is not None, tool
        (tools / tool).symlink_to(found)
    if cargo:
        (tools / "cargo").write_text("#!/bin/sh\nexit 0\n")
        (tools / "cargo").chmod(0o755)
    env = {"PATH": str(tools), "HOME": str(tmp_path / "home"), "SPATE_BOOTSTRAP_PLAN": "1"}
    return subprocess.run(
        ["/bin/bash", str(checkout / "scripts" / "bootstrap.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_b137_without_cargo_the_bootstrap_leaves_out_the_rust_extension(tmp_path: Path) -> None:
    plan = _plan(tmp_path, cargo=False)
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert "native=0" in lines and "MATURIN_NO_INSTALL_RUST=1" in lines
    assert "packages/spate-avro-native/" not in lines
    assert "packages/spate-avro" in lines and "packages/spate-avro[columnar]" not in lines
    assert "packages/spate-core/" in lines
    # The rest of the columnar extra is still installed: the type check reads it.
    assert "jetliner>=0.2" in lines and "polars>=1.30" in lines
    assert not any(line.startswith("spate-avro-native") for line in lines)


def test_b137_with_cargo_the_bootstrap_builds_the_rust_extension(tmp_path: Path) -> None:
    plan = _plan(tmp_path, cargo=True)
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert "native=1" in lines and "MATURIN_NO_INSTALL_RUST=1" in lines
    assert "packages/spate-avro-native/" in lines
    assert "packages/spate-avro[columnar]" in lines


def test_the_plan_leaves_the_environment_alone(tmp_path: Path) -> None:
    """Planning creates no virtual environment."""
    _plan(tmp_path, cargo=False)
    assert not (tmp_path / "checkout" / ".venv").exists()
