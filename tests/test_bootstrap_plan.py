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


def _plan(
    tmp_path: Path, *, cargo: bool, plan: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", checkout / "scripts" / "bootstrap.sh")
    for name in ("spate-core", "spate-avro", "spate-avro-native", "spate-json"):
        (checkout / "packages" / name).mkdir(parents=True, exist_ok=True)
    shutil.copy(
        ROOT / "packages" / "spate-avro" / "pyproject.toml",
        checkout / "packages" / "spate-avro" / "pyproject.toml",
    )
    tools = tmp_path / "tools"
    tools.mkdir()
    # Only what the script calls: a Python >= 3.11 and the shell's utilities.
    (tools / "python3").symlink_to(sys.executable)
    for tool in ("sha256sum", "cut", "cat", "dirname", "grep"):
        found = shutil.which(tool)
        assert found is not None, tool
        (tools / tool).symlink_to(found)
    if cargo:
        (tools / "cargo").write_text("#!/bin/sh\nexit 0\n")
        (tools / "cargo").chmod(0o755)
    environ = {
        "PATH": str(tools),
        "HOME": str(tmp_path / "home"),
        "SPATE_BOOTSTRAP_PLAN": "1" if plan else "0",
        **(env or {}),
    }
    return subprocess.run(
        ["/bin/bash", str(checkout / "scripts" / "bootstrap.sh")],
        env=environ,
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


PIP_STUB = """#!/bin/sh
echo "$*" >> "$ARGS_LOG"
case "$*" in *--upgrade*) exit 0;; esac
echo "Collecting spate-core"
echo "  Using cached spate_core-0.1.0.tar.gz"
echo "Building wheels for collected packages: spate-core"
echo "Installing collected packages: spate-core"
echo "Successfully installed spate-core-0.1.0"
exit "$PIP_STATUS"
"""
"""Stands in for ``.venv/bin/python -m pip``: pip's lines, one of them noise, and an exit
status of the test's choosing."""


def _install(tmp_path: Path, status: int) -> tuple[subprocess.CompletedProcess[str], str]:
    """The bootstrap's install step (not its plan) with pip stubbed out."""
    checkout = tmp_path / "checkout"
    (checkout / "examples" / "connectors" / "x").mkdir(parents=True)
    (checkout / "packages" / "spate-avro-native" / "src").mkdir(parents=True)
    for name in (
        "pyproject.toml",
        "requirements-dev.txt",
        "examples/connectors/x/pyproject.toml",
        "packages/spate-avro-native/Cargo.toml",
        "packages/spate-avro-native/src/lib.rs",
    ):
        (checkout / name).write_text("")
    venv = checkout / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(PIP_STUB)
    (venv / "python").chmod(0o755)
    log = tmp_path / "pip-args"
    run = _plan(
        tmp_path,
        cargo=False,
        plan=False,
        env={"ARGS_LOG": str(log), "PIP_STATUS": str(status)},
    )
    return run, log.read_text()


def test_b211_the_bootstrap_shows_pips_progress_and_fails_with_it(tmp_path: Path) -> None:
    """B211: pip's collecting, building and installing lines are shown as they come (not
    hidden behind ``--quiet`` for minutes), its other lines are not, and a failed install
    fails the bootstrap with pip's status, leaving no stamp that would skip the retry."""
    run, args = _install(tmp_path / "ok", 0)
    assert run.returncode == 0, run.stderr
    shown = run.stdout.splitlines()
    assert "Collecting spate-core" in shown and "Installing collected packages: spate-core" in shown
    assert "Successfully installed spate-core-0.1.0" in shown
    assert not any("Using cached" in line for line in shown)
    assert shown[-1] == "bootstrap: .venv is ready"
    install = [line for line in args.splitlines() if "--upgrade" not in line]
    assert len(install) == 1 and "--progress-bar off" in install[0]
    assert "--quiet" not in install[0]
    assert "cargo not found" in run.stderr  # and says why the extension is left out
    assert (tmp_path / "ok" / "checkout" / ".bootstrap-stamp").exists()

    failed, _ = _install(tmp_path / "failed", 1)
    assert failed.returncode == 1
    assert "pip install failed (exit 1" in failed.stderr
    assert not (tmp_path / "failed" / "checkout" / ".bootstrap-stamp").exists()
