"""One admission rule for rows, row batches and frames (B7, B95, B144; ADR 0013).

The same program of offers, writes and ticks is run against pools that take the rows
one at a time (``offer``), as a source batch's rows (``offer_rows``) and as frames
(``offer_frame``): every offer is accepted or refused alike, the same batches are
written, no batch holds more than ``batch.max_rows`` rows, a shard with nothing queued
never refuses, and a refused offer retains nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from spate import AckStatus, AckToken, Lane, ManualClock
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.sink import (
    BatchConfig,
    InflightConfig,
    ListRowBuffer,
    Offer,
    PoolConfig,
    ShardConfig,
    SinkPool,
)
from spate.testing._scripted import ScriptedEndpoints

from tests.support.scale import scaled

LANE = Lane("admission", 0)


class _TupleBuffer(ListRowBuffer):
    """Keeps rows; takes them one at a time, as a row block or as a frame (a tuple)."""

    __slots__ = ()

    def append_rows(self, block: Any) -> int:
        self.rows.extend(block.rows)
        return 10 * len(block.rows)

    def append_frame(self, frame: Any) -> int:
        self.rows.extend(frame)
        return 10 * len(frame)


class _Endpoints(ScriptedEndpoints):
    """Scripted endpoints whose frames are tuples of rows."""

    takes_frames = True

    def new_buffer(self, shard: int) -> Any:
        return _TupleBuffer(row_bytes=10)

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        assert isinstance(frame, tuple)
        return frame, []

    def take_rows(self, frame: object, rows: list[int]) -> object:
        assert isinstance(frame, tuple)
        return tuple(frame[i] for i in rows)


def _pool(max_rows: int, limit: int) -> tuple[SinkPool, _Endpoints]:
    clock = ManualClock()
    endpoints = _Endpoints(clock, takes_rows=True)
    pool = SinkPool(
        "admission",
        endpoints,
        shards=[ShardConfig(replicas=("s0",))],
        pipeline="admission",
        run_nonce="run1",
        meter=Meter("admission"),
        clock=clock,
        budget=InflightBudget(1 << 40),
        io_threads=0,
        config=PoolConfig(
            batch=BatchConfig(max_rows=max_rows, linger=3600.0),
            inflight=InflightConfig(max_per_shard=limit),
        ),
    )
    pool.start()
    return pool, endpoints


_Op = tuple[str, int]
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.integers(1, 12)),
        st.tuples(st.just("pump"), st.just(0)),
        st.tuples(st.just("tick"), st.just(0)),
    ),
    max_size=40,
)


def _run(kind: str, program: Sequence[_Op], max_rows: int, limit: int) -> tuple[Any, ...]:
    """Run ``program`` offering rows as ``kind``; return what can be compared."""
    pool, endpoints = _pool(max_rows, limit)
    outcomes: list[Offer] = []
    acks: list[AckToken] = []
    counter = 0
    for seq, (op, count) in enumerate(program):
        if op == "pump":
            pool.pump()
            continue
        if op == "tick":
            pool.tick()
            continue
        rows = [(counter + i,) for i in range(count)]
        ack = AckToken(LANE, 1, seq, counter + count, count, lambda token: None)
        holders = ack.holders
        queued = pool._shards[0].queue
        was_empty = not queued
        if kind == "row":
            assert count == 1
            result = pool.offer(rows[0], None, LANE, ack)
        elif kind == "rows":
            prepared, bad = pool.prepare_rows(list(rows), [None] * count, LANE)
            assert not bad
            result = pool.offer_rows(prepared, LANE, ack)
        else:
            prepared, bad = pool.prepare_frame(tuple(rows))
            assert not bad
            result = pool.offer_frame(prepared, None, LANE, ack)
        outcomes.append(result)
        if result is Offer.REJECTED:
            assert not was_empty, "a shard with nothing queued refused an offer"
            assert ack.holders == holders, "a refused offer retained its ack"
        else:
            counter += count
            acks.append(ack)
        ack.release(True)
    assert pool.flush(pool._clock.monotonic() + 1.0)
    written = [w.rows for w in endpoints.written]
    assert all(len(rows) <= max_rows for rows in written), written
    assert [r for rows in written for r in rows] == [(i,) for i in range(counter)]
    assert all(a.status is AckStatus.DELIVERED for a in acks)
    return tuple(outcomes), tuple(written)


@settings(max_examples=scaled(200, minimum=20), deadline=None)
@given(program=_OPS, max_rows=st.integers(1, 6), limit=st.integers(1, 3))
def test_b144_row_batches_and_frames_are_admitted_alike(
    program: list[_Op], max_rows: int, limit: int
) -> None:
    """B144: a source batch's rows and a frame of the same rows meet the same rule."""
    assert _run("rows", program, max_rows, limit) == _run("frame", program, max_rows, limit)


@settings(max_examples=scaled(200, minimum=20), deadline=None)
@given(program=_OPS, max_rows=st.integers(1, 6), limit=st.integers(1, 3))
def test_b144_one_row_is_admitted_alike_on_every_path(
    program: list[_Op], max_rows: int, limit: int
) -> None:
    """B144, B7: for single rows, ``offer``, ``offer_rows`` and ``offer_frame`` agree."""
    single = [(op, 1 if op == "offer" else 0) for op, _ in program]
    expected = _run("row", single, max_rows, limit)
    assert _run("rows", single, max_rows, limit) == expected
    assert _run("frame", single, max_rows, limit) == expected
