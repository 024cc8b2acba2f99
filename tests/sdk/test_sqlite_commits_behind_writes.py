"""B27 with B1: a YAML pipeline on the installed SQLite sink commits only what is in the file.

The pipeline file names ``sink: {sqlite: ...}``; spate finds the sink through its
``spate.sinks`` entry point like any connector (the example distribution is installed
in the development environment). Every time the runtime commits a position, the test
reads the database and checks that every record of that lane before the position is
already there: commits stay behind the SQLite writes, at every checkpoint, not only at
the end.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from spate import Lane
from spate.config import load_config
from spate.pipeline._builder import assemble
from spate.plugins import default_registry
from spate.testing import MemorySource

from tests.support.scale import scaled


def test_b27_b1_every_commit_trails_the_rows_in_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = default_registry()
    assert "sqlite" in registry.names("sink"), "install examples/connectors/spate-sqlite"
    partitions, records = 2, scaled(30_000, minimum=2_000)
    db = tmp_path / "out.db"
    config_file = tmp_path / "pipeline.yaml"
    config_file.write_text(
        f"""
pipeline: {{name: sdk-commits}}
source:
  memory: {{partitions: {partitions}, records: {records}, batch_size: 100}}
sink:
  sqlite:
    path: {db}
    table: t
    columns: [lane, payload]
    batch: {{max_rows: 300, linger: 20ms}}
checkpoint: {{interval: 100ms}}
admin: {{listen: none}}
"""
    )
    violations: list[str] = []
    checked: list[dict[Lane, int]] = []
    lock = threading.Lock()
    original = MemorySource.commit

    def commit_and_check(self: MemorySource, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        conn = sqlite3.connect(db)
        try:
            stored = {bytes(r[0]) for r in conn.execute("SELECT payload FROM t")}
        except sqlite3.OperationalError:
            stored = set()
        finally:
            conn.close()
        with lock:
            for lane, position in offsets.items():
                missing = [
                    o for o in range(position) if f"{lane.partition}:{o}".encode() not in stored
                ]
                if missing:
                    violations.append(f"{lane} committed {position}, not in SQLite: {missing[:5]}")
            checked.append(dict(offsets))
        original(self, offsets, sync=sync)

    monkeypatch.setattr(MemorySource, "commit", commit_and_check)

    # Pace the chain (about 200 short pauses in all) so that the run spans several
    # checkpoint intervals and commits happen while rows are still being written.
    every = max(1, partitions * records // 200)
    seen = [0]

    def chains(ctx: object) -> object:
        def row(view: memoryview) -> tuple[int, bytes]:
            seen[0] += 1
            if seen[0] % every == 0:
                time.sleep(0.005)
            payload = bytes(view)
            return int(payload.split(b":", 1)[0]), payload

        return ctx.chain().map(row).sink("sink")  # type: ignore[attr-defined]

    cfg = load_config(config_file, resolver=registry)
    assembly = assemble(cfg, registry=registry, chains=chains, handle_signals=False)
    report = assembly.pipeline.run()

    assert report.exit_code == 0, report.summary()
    assert violations == []
    assert len(checked) >= 2, f"expected commits during the run, got {checked}"
    assert report.committed == {Lane("memory", p): records for p in range(partitions)}
    conn = sqlite3.connect(db)
    try:
        rows = sorted((int(r[0]), bytes(r[1])) for r in conn.execute("SELECT lane, payload FROM t"))
    finally:
        conn.close()
    expected = sorted((p, f"{p}:{o}".encode()) for p in range(partitions) for o in range(records))
    assert rows == expected
