"""Frames under ``delivery: effectively_once`` (B88, B89, B145), offline.

The columnar path offers a source batch's rows as one frame; under effectively once the
pool places each row by its record's offset (the batch's offsets, at the row's record
index), so a frame's rows land in the same blocks, under the same intents and tokens, as
the same rows offered one at a time, and a replay rebuilds the recorded blocks whatever
the batches and block sizes are now. The intent table and the token deduplication are
the in-memory doubles of ``test_pool_effectively_once`` (the real ones are proven
against the HTTP front and the broker in tests/kafka).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from spate import AckStatus, AckToken
from spate.sink import Intent, Offer, RecordPosition

from .test_pool_admission import _TupleBuffer
from .test_pool_effectively_once import LANE, IntentEndpoints, eo_pool

pl = pytest.importorskip("polars")

# Records (offset, rows they give): gaps in the offsets (a compacted topic, transaction
# markers) and records giving no row, one, or two.
RECORDS = [(10, 1), (11, 2), (13, 1), (14, 0), (15, 1), (20, 2), (21, 1), (22, 1), (30, 3)]


class FrameIntentEndpoints(IntentEndpoints):
    """The intent endpoints taking frames: a prepared frame is a tuple of rows."""

    takes_frames = True

    def new_buffer(self, shard: int) -> Any:
        return _TupleBuffer(row_bytes=10)

    def prepare_frame(self, frame: Any) -> tuple[object, list[tuple[int, str]]]:
        return tuple(frame.drop("__spate_row").rows()), []

    def take_rows(self, frame: Any, rows: list[int]) -> object:
        return tuple(frame[i] for i in rows)


def _frames_pool(intents: list[tuple[str, str, Intent]], max_rows: int) -> Any:
    import spate.sink._pool as pool_module

    original = pool_module.SinkPool.__init__

    def with_frames(self: Any, name: str, connector: Any, **kw: Any) -> None:
        assert isinstance(connector, IntentEndpoints)
        connector.__class__ = FrameIntentEndpoints
        original(self, name, connector, **kw)

    pool_module.SinkPool.__init__ = with_frames  # type: ignore[method-assign]
    try:
        return eo_pool(intents, max_rows=max_rows)
    finally:
        pool_module.SinkPool.__init__ = original  # type: ignore[method-assign]


def _rows_of(records: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``(record index, offset, k)`` of every row the records give, in order."""
    return [(i, off, k) for i, (off, n) in enumerate(records) for k in range(n)]


def _offer_frame(pool: Any, position: RecordPosition, batch: list[tuple[int, int]]) -> AckToken:
    rows = _rows_of(batch)
    ack = AckToken(LANE, 0, batch[0][0], batch[-1][0] + 1, len(batch), lambda t: None)
    position.offsets = [off for off, _ in batch]
    df = pl.DataFrame(
        {
            "offset": [off for _, off, _ in rows],
            "k": [k for _, _, k in rows],
            "__spate_row": pl.Series([i for i, _, _ in rows], dtype=pl.UInt32),
        }
    )
    prepared, bad = pool.prepare_frame(df)
    assert not bad
    while pool.offer_frame(prepared, None, LANE, ack) is Offer.REJECTED:
        pool.pump()  # the shard's queue is full: let the writes run, offer it again
    ack.release(True)
    return ack


def _offer_rows(pool: Any, position: RecordPosition, batch: list[tuple[int, int]]) -> AckToken:
    ack = AckToken(LANE, 0, batch[0][0], batch[-1][0] + 1, len(batch), lambda t: None)
    for off, n in batch:
        position.offset = off
        for k in range(n):
            while pool.offer((off, k), None, LANE, ack) is Offer.REJECTED:
                pool.pump()
    ack.release(True)
    return ack


def _batches(records: list[tuple[int, int]], cuts: list[int]) -> list[list[tuple[int, int]]]:
    edges = [0, *cuts, len(records)]
    return [records[a:b] for a, b in pairwise(edges) if b > a]


@pytest.mark.parametrize(("cuts", "max_rows"), [([3, 5], 3), ([1, 2, 6], 2), ([], 4), ([4], 100)])
def test_b145_a_frame_lands_in_the_blocks_its_rows_would_one_at_a_time(
    cuts: list[int], max_rows: int
) -> None:
    """B145: the same batches as frames and as rows one at a time give the same blocks,
    intents and tokens (ticks after the same batches)."""
    runs = []
    for offer in (_offer_rows, _offer_frame):
        intents: list[tuple[str, str, Intent]] = []
        pool, ends, position = _frames_pool(intents, max_rows)
        acks = []
        for n, batch in enumerate(_batches(RECORDS, cuts)):
            acks.append(offer(pool, position, batch))
            if n % 2:
                pool.tick()
        pool.tick()
        pool.pump()
        assert all(a.status is AckStatus.DELIVERED for a in acks)
        runs.append(([w.token for w in ends.written], sorted(ends.kept), sorted(intents)))
    assert runs[0] == runs[1]
    assert runs[1][1] == sorted((off, k) for _, off, k in _rows_of(RECORDS))


def test_b145_a_replay_of_frames_rebuilds_the_recorded_blocks() -> None:
    """B145, B89: a first run inserts some blocks and records the intents of more, then
    dies before their inserts; the restart replays from an earlier offset with other
    batches and block sizes, rebuilds the recorded blocks under their tokens, and every
    row lands once."""
    intents: list[tuple[str, str, Intent]] = []
    pool, ends, position = _frames_pool(intents, max_rows=3)
    for batch in _batches(RECORDS[:5], [2]):
        _offer_frame(pool, position, batch)
    pool.tick()
    written = {w.token for w in ends.written}
    ends.script("s0", "retryable", times=100)  # intents recorded, inserts lost: a crash
    _offer_frame(pool, position, RECORDS[5:7])  # three rows: one block, sealed at max_rows
    pool.pump()
    recorded = {i.token("p", "events") for _, _, i in intents}
    assert written and recorded - written
    pool2, ends2, position2 = _frames_pool(intents, max_rows=1)
    ends2.tokens = set(ends.tokens)
    ends2.kept = list(ends.kept)
    acks = [_offer_frame(pool2, position2, b) for b in _batches(RECORDS[1:], [1, 2, 3, 6])]
    pool2.tick()
    pool2.pump()
    assert all(a.status is AckStatus.DELIVERED for a in acks)
    assert recorded <= {w.token for w in ends2.written} | written
    assert sorted(ends2.kept) == sorted((off, k) for _, off, k in _rows_of(RECORDS))
