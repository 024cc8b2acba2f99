"""B53: the Parquet sink takes Arrow columns (the columnar path) and cuts, names and
writes exactly the files the row path writes for the same input.

The frames are polars DataFrames with each row's record index, as the frame executor
hands them over; the sink checks them per column (``prepare_frame``) and takes them whole
(``offer_frame``).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from spate.records import Lane

from .harness import (
    BASE,
    LAYOUT_SCHEMA,
    LAYOUTS,
    Feeder,
    any_batching,
    layout_rows,
    make_sink,
    write_fed,
)
from .readback import local_files, parquet_rows

pytest.importorskip("polars")

LANE = Lane("orders", 3)
SCHEMA = LAYOUT_SCHEMA
_rows = layout_rows


@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_b53_frames_write_the_same_files_as_rows(tmp_path: Path, layout: int) -> None:
    body = dict(LAYOUTS[layout], max_bytes="1GiB")
    rows = _rows(240)
    by_rows = write_fed(tmp_path / "rows", body, rows, [40, 7], frames=False)
    by_frames = write_fed(tmp_path / "frames", body, rows, [40, 7], frames=True)
    assert by_rows, "nothing written"
    assert sorted(by_rows) == sorted(by_frames)
    assert all(by_rows[k] == by_frames[k] for k in by_rows), "same names, different bytes"
    assert sorted(r["id"] for r in parquet_rows(by_frames)) == list(range(240))


@any_batching
def test_b53_frames_and_rows_cut_identical_files_for_any_batching(
    tmp_path_factory: pytest.TempPathFactory,
    count: int,
    sizes: list[int],
    max_records: int,
    minutes: int,
    layout: int,
) -> None:
    body = dict(LAYOUTS[layout], max_records=max_records, max_bytes="1GiB")
    rows = _rows(count, minutes)
    root = tmp_path_factory.mktemp("eq")
    by_rows = write_fed(root / "rows", body, rows, sizes, frames=False)
    by_frames = write_fed(root / "frames", body, rows, sizes, frames=True)
    assert sorted(by_rows) == sorted(by_frames)
    assert all(by_rows[k] == by_frames[k] for k in by_rows)


def test_b53_a_frame_replay_after_a_crash_writes_the_clean_runs_files(tmp_path: Path) -> None:
    body = {"schema": SCHEMA, "max_records": 45, "partition_by": ["country"], "max_bytes": "1GiB"}
    rows = _rows(300)
    clean = write_fed(tmp_path / "clean", body, rows, [25], frames=True)
    root = tmp_path / "crashed"
    sink = make_sink({"path": str(root), **body})
    feeder = Feeder(sink)
    feeder.feed(LANE, rows[:170], 0, [25], frames=True)
    for _ in range(600):
        if not sink._jobs and not sink._busy:
            break
        threading.Event().wait(0.05)
    committed = feeder.committed(LANE)
    sink.abandon()  # kill -9: open windows are lost, their acks never delivered
    sink.close()
    assert 0 < committed < 170
    sink = make_sink({"path": str(root), **body})
    Feeder(sink).feed(LANE, rows, committed, [19], frames=True)
    assert sink.flush(float("inf"))
    sink.close()
    crashed = local_files(root)
    assert sorted(crashed) == sorted(clean)
    assert all(crashed[k] == clean[k] for k in clean)
    assert sorted(r["id"] for r in parquet_rows(crashed)) == list(range(300))


def test_b53_values_a_column_cannot_take_are_record_errors_for_those_rows(tmp_path: Path) -> None:
    body = {
        "schema": {"id": "int32", "ts": "timestamp[ms, tz=UTC]"},
        "window": "1h",
        "time_column": "ts",
    }
    sink = make_sink({"path": str(tmp_path), **body})
    feeder = Feeder(sink)
    rows = [
        {"id": 1, "ts": BASE, "extra": None},
        {"id": 2**40, "ts": BASE, "extra": None},  # does not fit int32
        {"id": 3, "ts": None, "extra": None},  # no time: no window
        {"id": 4, "ts": BASE, "extra": "x"},  # a value in a column the schema lacks
        {"id": 5, "ts": BASE, "extra": None},
    ]
    _, bad = feeder.frame_batch(LANE, 0, rows)
    assert [position for position, _ in bad] == [1, 2, 3]
    assert "does not fit int32" in bad[0][1] and "is null" in bad[1][1]
    assert "'extra' is not in the schema" in bad[2][1]
    assert sink.flush(float("inf"))
    sink.close()
    files = local_files(tmp_path)
    assert sorted(r["id"] for r in parquet_rows(files)) == [1, 5]


def test_b53_a_filtered_frame_keeps_each_rows_source_position(tmp_path: Path) -> None:
    """Rows an operator dropped leave gaps in ``__spate_row``; the file names the exact
    first and last record position it holds."""
    body = {"schema": SCHEMA, "max_records": 1000}
    sink = make_sink({"path": str(tmp_path), **body})
    rows = _rows(10)
    kept = [2, 3, 7]
    Feeder(sink).frame_batch(LANE, 100, [rows[i] for i in kept], records=10, indexes=kept)
    assert sink.flush(float("inf"))
    sink.close()
    (name,) = local_files(tmp_path)
    assert f"-{102:020d}-{107:020d}-" in name
    assert pq.read_table(tmp_path / name).column("id").to_pylist() == kept
