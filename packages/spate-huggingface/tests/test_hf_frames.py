"""The Hugging Face sink takes frames from a columnar chain (B173).

Each row of a frame is shaped as a row offered alone: its window comes from its time
column, and a row whose time cannot be read is a record error for that row alone, named
by its position; the other rows are committed in their windows as offered rows are.
"""

from __future__ import annotations

import time

import pytest
from spate.checkpoint import AckStatus
from spate.checkpoint._ack import AckToken
from spate.sink import Offer

from tests.support.hub import HubServer

from .harness import LANE, REPO, TOKEN, body, make_sink, parquet_rows

pl = pytest.importorskip("polars")


def test_b173_a_frame_is_cut_into_windows_and_a_bad_time_refuses_its_row_alone() -> None:
    hour = 3_600_000  # epoch milliseconds
    with HubServer(token=TOKEN) as hub:
        hub.create_repo(REPO)
        sink = make_sink(
            body(
                hub,
                schema={"id": "int64", "at": "int64"},
                window_time="record",
                time_column="at",
            )
        )
        try:
            frame = pl.DataFrame(
                {
                    "id": [0, 1, 2, 3],
                    "at": [hour // 6, None, hour + 1, 2 * hour + 5],
                    "__spate_row": [0, 1, 2, 3],
                }
            )
            prepared, bad = sink.prepare_frame(frame)
            assert [position for position, _ in bad] == [1]  # no time: a record error
            token = AckToken(LANE, 1, 0, 4, 4, lambda t: None)
            assert sink.offer_frame(prepared, None, LANE, token) is Offer.ACCEPTED
            token.release(True)
            assert sink.flush(time.monotonic() + 30)
            assert token.status is AckStatus.DELIVERED
            files = hub.files(REPO)
            rows = sorted(parquet_rows(files), key=lambda r: r["id"])
            assert [r["id"] for r in rows] == [0, 2, 3]
            assert len([p for p in files if p.endswith(".parquet")]) == 3  # one per window
        finally:
            sink.close()
