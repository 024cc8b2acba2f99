"""B103: the Parquet sink takes a source batch's rows at once (``prepare_rows`` /
``offer_rows``), checks them per column, refuses exactly the rows ``offer`` would refuse,
and cuts, names and writes exactly the files one ``offer`` per row writes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from spate.errors import SinkError
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

LANE = Lane("orders", 3)
SCHEMA = LAYOUT_SCHEMA


@any_batching
def test_b103_row_batches_and_single_rows_cut_identical_files(
    tmp_path_factory: pytest.TempPathFactory,
    count: int,
    sizes: list[int],
    max_records: int,
    minutes: int,
    layout: int,
) -> None:
    body = dict(LAYOUTS[layout], max_records=max_records, max_bytes="1GiB")
    rows = layout_rows(count, minutes)
    root = tmp_path_factory.mktemp("eq")
    one_by_one = write_fed(root / "rows", body, rows, sizes, batched=False)
    batched = write_fed(root / "batches", body, rows, sizes, batched=True)
    assert one_by_one and sorted(one_by_one) == sorted(batched)
    assert all(one_by_one[k] == batched[k] for k in one_by_one), "same names, different bytes"


def test_b103_a_batch_refuses_exactly_the_rows_offer_refuses(tmp_path: Path) -> None:
    body = {"schema": {"id": "int32", "ts": "timestamp[ms, tz=UTC]"}, "window": "1h"}
    body["time_column"] = "ts"
    rows: list[object] = [
        {"id": 1, "ts": BASE},
        {"id": "2", "ts": BASE},  # a str in an int column
        {"id": 3, "ts": None},  # no time: no window
        {"id": 4, "ts": BASE, "extra": "x"},  # a column the schema lacks
        (5, BASE),  # a tuple in the declared column order
        {"id": True, "ts": BASE},  # a bool is not an int here
        {"id": 7},  # no time column at all
        {"id": 2**40, "ts": BASE},  # an int that int32 cannot hold
        {"id": 9, "ts": BASE},
    ]
    single = make_sink({"path": str(tmp_path / "single"), **body})
    refused_by_offer = []
    feeder = Feeder(single)
    for i, row in enumerate(rows[:7]):  # the int beyond int32 fails a whole file there
        try:
            feeder.batch(LANE, i, [row])  # type: ignore[list-item]
        except SinkError:
            refused_by_offer.append(i)
    single.close()
    sink = make_sink({"path": str(tmp_path / "batch"), **body})
    assert sink.takes_rows
    _, bad = Feeder(sink).rows_batch(LANE, 0, rows)
    assert [position for position, _ in bad] == [*refused_by_offer, 7]
    assert "does not fit int32" in bad[-1][1]
    assert sink.flush(float("inf"))
    sink.close()
    files = local_files(tmp_path / "batch")
    assert sorted(r["id"] for r in parquet_rows(files)) == [1, 5, 9]
    (name,) = files
    assert f"-{0:020d}-{8:020d}-" in name, "each row keeps its index in the batch"


def test_b103_batches_skip_what_a_durable_file_holds_after_a_restart(tmp_path: Path) -> None:
    body = {"schema": SCHEMA, "max_records": 40}
    rows = layout_rows(200)
    clean = write_fed(tmp_path / "clean", body, rows, [30], batched=True)
    root = tmp_path / "crashed"
    first = make_sink({"path": str(root), **body})
    Feeder(first).feed(LANE, rows[:130], 0, [30], batched=True)
    first.abandon()  # a crash: the open window's rows are lost, the written files stay
    first.close()
    again = make_sink({"path": str(root), **body})
    Feeder(again).feed(LANE, rows, 0, [30], batched=True)  # replay from the start
    assert again.flush(float("inf"))
    again.close()
    crashed = local_files(root)
    assert crashed == clean
    assert sorted(r["id"] for r in parquet_rows(crashed)) == list(range(200))


def test_b103_without_a_declared_schema_rows_come_one_by_one(tmp_path: Path) -> None:
    sink = make_sink({"path": str(tmp_path)})
    assert not sink.takes_rows
    sink.close()
    sink = make_sink({"path": str(tmp_path), "schema": SCHEMA, "one_row_per_record": False})
    assert not sink.takes_rows
    sink.close()


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("zone", [dt.UTC, None])
def test_b103_datetimes_convert_to_the_array_pyarrow_builds(unit: str, zone: Any) -> None:
    """The epoch-distance conversion floors like pyarrow, before 1970 too."""
    import random

    import pyarrow as pa
    from spate_parquet._schema import to_array

    rng = random.Random(7)
    epoch = dt.datetime(1970, 1, 1, tzinfo=zone)
    span = 9 * 10**15 if unit == "ns" else 6 * 10**16  # ns: within 1678..2261
    values: list[object] = [
        epoch + dt.timedelta(microseconds=rng.randint(-span, span)) for _ in range(5000)
    ]
    values += [
        dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=zone),
        dt.datetime(1960, 1, 1, 0, 0, 0, 1_500, tzinfo=zone),
        epoch,
    ]
    for kind in (pa.timestamp(unit, tz="UTC"), pa.timestamp(unit)):
        expected = pa.array(values, type=kind)
        got = to_array(values, kind)
        assert got.type == expected.type and got.equals(expected)
