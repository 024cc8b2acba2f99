"""A running pool's batch limits change (``SinkPool.resize``, B224): batches grow to the
larger limit, and when it shrinks below an open batch's rows that batch is sealed, so
no row is written twice or lost (rows offered one by one and a source batch's at once).
"""

from __future__ import annotations

import pytest
from spate import AckToken, Lane, ManualClock
from spate.sink import BatchConfig, InflightConfig, PoolConfig
from spate.testing import scripted_pool

LANE = Lane("resize", 0)


@pytest.mark.parametrize("kind", ["row", "rows"])
def test_b224_resized_limits_cut_every_row_once(kind: str) -> None:
    pool, ends = scripted_pool(
        "resize",
        clock=ManualClock(),
        takes_rows=kind == "rows",
        config=PoolConfig(
            batch=BatchConfig(max_rows=50, linger=3600.0),
            inflight=InflightConfig(max_per_shard=1000),
        ),
    )
    pool.start()
    counter = 0

    def offer(count: int) -> None:
        nonlocal counter
        rows = [(counter + i,) for i in range(count)]
        ack = AckToken(LANE, 1, counter, counter + count, count, lambda token: None)
        if kind == "row":
            for row in rows:
                pool.offer(row, None, LANE, ack)
        else:
            prepared, bad = pool.prepare_rows(list(rows), [None] * count, LANE)
            assert not bad
            pool.offer_rows(prepared, LANE, ack)
        ack.release(True)
        counter += count

    offer(120)  # 50, 50 and 20 open
    pool.resize(max_rows=400, max_bytes=1 << 30, linger=3600.0)
    offer(300)  # the open batch grows to 320
    pool.resize(max_rows=50, max_bytes=1 << 30, linger=3600.0)  # sealed at 320
    offer(75)
    assert pool.flush(pool._clock.monotonic() + 1.0)
    written = [w.rows for w in ends.written]
    assert [len(rows) for rows in written] == [50, 50, 320, 50, 25]
    assert [r for rows in written for r in rows] == [(i,) for i in range(counter)]
