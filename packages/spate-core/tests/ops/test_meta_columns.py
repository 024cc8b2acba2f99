"""Metadata columns are the same values whichever way rows reach the sink (B252, B256):
row by row (the wrapped offer), a batch's rows at once, and a frame's columns, on
generated batches with odd headers (non-UTF-8 bytes, empty and ``None`` values, repeated
keys, records without the header) and rows repeated or left out as a chain's flat_map
and filter make them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate.ops._meta import RowMeta
from spate.records import ROW_COLUMN, Headers, Lane, MetaColumn, MetaSource, PayloadBatch
from spate.sink._held import RecordCell

from .test_meta import META_COLUMNS

pl = pytest.importorskip("polars")

COLUMNS = (*META_COLUMNS, MetaColumn("empty_name", MetaSource("header", ""), 9))
_header_keys = st.sampled_from(["tenant", "", "other", "Tenant"])
_header_values = st.none() | st.binary(max_size=5) | st.just(b"\xff\xfe")
_record = st.tuples(
    st.none() | st.binary(max_size=4),  # key
    st.integers(0, 2**41),  # timestamp (ms)
    st.binary(max_size=8),  # value
    st.lists(st.tuples(_header_keys, _header_values), max_size=5),  # headers
)


def _batch(records: list[tuple[Any, int, bytes, list[Any]]], first: int) -> PayloadBatch:
    offsets = [first + 2 * i for i in range(len(records))]  # gaps, as compaction leaves
    return PayloadBatch.lazy(
        Lane("orders", 5),
        [r[2] for r in records],
        first_offset=offsets[0],
        next_offset=offsets[-1] + 1,
        offsets=offsets,
        keys=lambda: [r[0] for r in records],
        timestamps=lambda: [r[1] for r in records],
        headers=lambda: [Headers.of(r[3]) for r in records],
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_record, min_size=1, max_size=8),
    st.integers(0, 2**40),
    st.data(),
)
def test_b256_rows_one_by_one_rows_at_once_and_frames_get_the_same_metadata(
    records: list[tuple[Any, int, bytes, list[Any]]], first: int, data: st.DataObject
) -> None:
    batch = _batch(records, first)
    # Which record each row came from: in order, some left out, some repeated.
    indexes = sorted(
        data.draw(st.lists(st.integers(0, len(records) - 1), max_size=3 * len(records)))
    )
    meta = RowMeta(COLUMNS, RecordCell())
    rows: list[object] = [{"v": i} for i in range(len(indexes))]
    at_once = meta.rows(rows, indexes, batch)
    one_by_one = [meta.one(row, batch, r) for row, r in zip(rows, indexes, strict=True)]
    assert at_once == one_by_one
    tuples = meta.rows([(i,) for i in range(len(indexes))], indexes, batch)
    names = ["v", *(c.name for c in COLUMNS)]
    assert [dict(zip(names, t, strict=True)) for t in tuples] == at_once  # type: ignore[arg-type]
    frame = pl.DataFrame(
        {"v": list(range(len(indexes))), ROW_COLUMN: indexes},
        schema={"v": pl.Int64, ROW_COLUMN: pl.Int64},
    )
    from_frame = meta.frame(frame, batch, "sink").drop(ROW_COLUMN).to_dicts()
    assert from_frame == at_once
    # And each value is the record's own.
    for row, r in zip(at_once, indexes, strict=True):
        key, timestamp, value, headers = records[r]
        assert isinstance(row, dict)
        assert row["off"] == first + 2 * r and row["part"] == 5 and row["topic"] == "orders"
        assert row["ms"] == timestamp and row["key"] == key and row["raw"] == value
        assert row["ts"] == dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
            milliseconds=timestamp
        )
        tenants = [v for k, v in headers if k == "tenant"]
        assert row["tenant"] == (tenants[-1] if tenants else None)
