"""spate-sqlite beyond the conformance suite: a whole pipeline, error classes, schema checks.

A memory source through the SQLite sink delivers every record and commits only what is
in the file (B2, B27); every sqlite3 exception class maps to a SinkError class (B12);
``create_table: false`` checks the table at start-up, naming the file (B29); the token
table keeps ``dedup_window`` tokens (B9).
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest
from spate import ErrorClass, Pipeline, SinkError, SystemClock
from spate.config import decode
from spate.config.models import BackpressureConfig
from spate.metrics import Meter
from spate.plugins import BuildContext
from spate.sink import WriteBatch
from spate.testing import memory_source
from spate_sqlite import (
    SqliteConnector,
    SqliteSinkConfig,
    SqliteSinkFactory,
    classify,
    read_rows,
)


def _config(path: Path, **extra: object) -> SqliteSinkConfig:
    raw: dict[str, object] = {"path": str(path), "columns": ["lane", "payload"], **extra}
    return decode(SqliteSinkConfig, raw, "sink.sqlite")


def test_b27_memory_pipeline_into_sqlite_delivers_everything_and_commits_behind_it(
    tmp_path: Path,
) -> None:
    name = f"sqlite-{uuid.uuid4().hex[:6]}"
    meter = Meter(name)
    budget = Pipeline.new_budget(BackpressureConfig())
    context = BuildContext(
        pipeline=name,
        component="sink",
        meter=meter,
        clock=SystemClock(),
        run_nonce="n1",
        budget=budget,
    )
    db = tmp_path / "out.db"
    sink = SqliteSinkFactory.build(_config(db, batch={"max_rows": 64, "linger": "50ms"}), context)
    payloads = {p: [f"r{p}-{i}".encode() for i in range(300)] for p in range(3)}
    source, handle = memory_source(payloads, stream="in", batch_size=50)
    pipeline = Pipeline(
        name, source, {"sink": sink}, meter=meter, budget=budget, handle_signals=False
    ).chains(
        lambda ctx: (
            ctx.chain().map(lambda view: (bytes(view)[1:2].decode(), bytes(view))).sink("sink")
        )
    )
    report = pipeline.run()
    assert report.exit_code == 0
    rows = read_rows(db, "events", ("lane", "payload"))
    assert sorted(p for _, p in rows) == sorted(v for vs in payloads.values() for v in vs)
    assert {lane.partition: off for lane, off in handle.committed.items()} == {
        0: 300,
        1: 300,
        2: 300,
    }


@pytest.mark.parametrize(
    "exc_class",
    [
        sqlite3.Error,
        sqlite3.DatabaseError,
        sqlite3.OperationalError,
        sqlite3.IntegrityError,
        sqlite3.DataError,
        sqlite3.InternalError,
        sqlite3.ProgrammingError,
        sqlite3.NotSupportedError,
        sqlite3.InterfaceError,
    ],
)
def test_b12_every_sqlite_exception_class_maps_to_a_sink_error(
    exc_class: type[sqlite3.Error],
) -> None:
    error = classify(exc_class("boom"), "db")
    assert isinstance(error, SinkError)
    assert "db" in str(error)
    expected = ErrorClass.RETRYABLE if exc_class is sqlite3.OperationalError else ErrorClass.FATAL
    assert error.error_class is expected


def test_b12_busy_is_retryable_and_a_missing_table_is_fatal(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (a)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(db, timeout=0.05, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError) as busy:
        other.execute("BEGIN IMMEDIATE")
    assert classify(busy.value, "x").error_class is ErrorClass.RETRYABLE
    holder.execute("ROLLBACK")
    with pytest.raises(sqlite3.OperationalError) as missing:
        other.execute("INSERT INTO nope VALUES (1)")
    assert classify(missing.value, "x").error_class is ErrorClass.FATAL
    holder.close()
    other.close()


def test_b29_missing_table_without_create_table_fails_the_probe_naming_file_and_table(
    tmp_path: Path,
) -> None:
    db = tmp_path / "empty.db"
    writer = SqliteConnector(_config(db, create_table=False)).open_writer(0, 0, str(db))
    with pytest.raises(SinkError) as info:
        writer.probe()
    assert str(db) in str(info.value) and "'events'" in str(info.value)
    writer.close()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE events (lane)")
    conn.close()
    writer = SqliteConnector(_config(db, create_table=False)).open_writer(0, 0, str(db))
    with pytest.raises(SinkError, match=r"no column \['payload'\]"):
        writer.probe()
    writer.close()


def test_b9_the_token_table_keeps_the_last_dedup_window_tokens(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    connector = SqliteConnector(_config(db, dedup_window=3))
    writer = connector.open_writer(0, 0, str(db))
    writer.probe()
    for seq in range(1, 7):
        buffer = connector.new_buffer(0)
        size = buffer.append(("a", f"row-{seq}".encode()))
        writer.write(WriteBatch(buffer, 1, size, 0, seq, f"p-n-0-{seq}", 1))
    writer.close()
    conn = sqlite3.connect(db)
    tokens = [row[0] for row in conn.execute("SELECT token FROM _spate_tokens ORDER BY seq")]
    conn.close()
    assert tokens == ["p-n-0-4", "p-n-0-5", "p-n-0-6"]
    assert len(read_rows(db, "events", ("lane", "payload"))) == 6
