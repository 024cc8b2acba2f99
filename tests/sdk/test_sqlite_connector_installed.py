"""B27: an out-of-tree connector is usable from YAML after ``pip install``, with no change to spate.

A fresh virtual environment gets spate-core (a wheel built from this checkout) and then
``pip install examples/connectors/spate-sqlite`` exactly as a user would run it. Inside
that environment ``spate plugins`` lists the SQLite sink, ``spate validate`` accepts a
pipeline file using ``sink: {sqlite: ...}`` and ``spate run`` delivers every record of
the memory source into the database file, exits 0 (everything committed, B16) and
reports final positions at the end of every lane. A package made by
``spate new-connector`` installs into the same environment and is listed too.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.support.scale import scaled
from tests.support.venvs import build_wheels, run

pytestmark = pytest.mark.packaging

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "connectors" / "spate-sqlite"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with spate-core, then the example connector pip-installed."""
    wheels = tmp_path_factory.mktemp("wheels")
    build_wheels(wheels, [REPO_ROOT / "packages" / "spate-core"])
    root = tmp_path_factory.mktemp("venv-sqlite")
    run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
    pip = [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install"]
    run([*pip, "--quiet", "--find-links", str(wheels), "spate-core==0.1.0"], cwd=root)
    # What the user types, from a checkout of spate.
    run([*pip, "--quiet", "--find-links", str(wheels), str(EXAMPLE)], cwd=root)
    return root


def test_b27_spate_plugins_lists_the_installed_sqlite_sink(venv: Path) -> None:
    proc = run([str(venv / "bin" / "spate"), "plugins"], cwd=venv)
    rows = [line.split() for line in proc.stdout.splitlines()[1:] if line.strip()]
    assert ["sqlite", "sink", "spate-sqlite", "0.1.0"] in rows, proc.stdout
    # Only what this environment has: core's built-ins and the connectors installed.
    assert {row[2] for row in rows} <= {"spate-core", "spate-sqlite", "spate-ledger"}


def test_b27_spate_run_delivers_every_memory_record_into_sqlite(venv: Path) -> None:
    partitions, records = 3, scaled(20_000, minimum=500)
    work = venv / "run"
    work.mkdir()
    (work / "pipeline.yaml").write_text(
        f"""
pipeline: {{name: sdk-sqlite}}
source:
  memory: {{partitions: {partitions}, records: {records}, batch_size: 250}}
sink:
  sqlite:
    path: out.db
    table: payloads
    columns: [payload]
    batch: {{max_rows: 1000, linger: 100ms}}
checkpoint: {{interval: 200ms}}
admin: {{listen: none}}
"""
    )
    spate = str(venv / "bin" / "spate")
    checked = run([spate, "validate", "pipeline.yaml"], cwd=work)
    assert "sink sqlite" in checked.stdout, checked.stdout
    proc = run([spate, "run", "pipeline.yaml"], cwd=work, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    conn = sqlite3.connect(work / "out.db")
    try:
        stored = [bytes(row[0]) for row in conn.execute("SELECT payload FROM payloads")]
    finally:
        conn.close()
    expected = [f"{p}:{o}".encode() for p in range(partitions) for o in range(records)]
    assert len(stored) == len(expected)  # a clean run writes each record once
    assert sorted(stored) == sorted(expected)
    marks = re.findall(r'completed .*watermarks=\[(.*?)\]"', proc.stderr)
    assert marks, proc.stderr[-2000:]
    assert marks[-1] == ", ".join(f"memory[{p}]={records}" for p in range(partitions))


def test_b27_a_package_from_spate_new_connector_installs_and_is_listed(venv: Path) -> None:
    """The template ships inside spate-core's wheel; what it makes is a plugin at once."""
    work = venv / "scaffold"
    work.mkdir()
    run([str(venv / "bin" / "spate"), "new-connector", "ledger"], cwd=work)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    run([*pip, "--quiet", "--no-deps", str(work / "spate-ledger")], cwd=work)
    proc = run([str(venv / "bin" / "spate"), "plugins"], cwd=work)
    rows = [line.split() for line in proc.stdout.splitlines()[1:] if line.strip()]
    assert ["ledger", "sink", "spate-ledger", "0.1.0"] in rows, proc.stdout
