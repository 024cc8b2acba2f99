"""What a written batch leaves behind in the ClickHouse sink's process (B105).

clickhouse-connect's ``InsertContext`` refers to itself (a bound method among its
attributes) and keeps the columns it was given after the insert. One per batch made
every batch's rows cyclic garbage, freed only when the cyclic collector next ran a full
collection — rarely, with the pipeline's raised collection threshold — so a long run's
memory climbed with the rows written before it levelled off. The writer reuses one
context per worker thread instead.
"""

from __future__ import annotations

import gc

import pytest
from spate.sink import WriteBatch

from tests.clickhouse.sinkkit import build_sink
from tests.support.chfront_fixtures import FrontFactory

pytestmark = pytest.mark.integration

BATCHES = 20
ROWS = 200


def test_b105_written_batches_leave_no_garbage_cycle_holding_their_rows(
    chfront: FrontFactory,
) -> None:
    """B105: after twenty batches, with the cyclic collector off, at most one insert
    context (this thread's, holding the last batch) is alive, and every row landed."""
    front = chfront()
    client = front.client()
    client.command("CREATE TABLE mem (id UInt64, s String) ENGINE = MergeTree ORDER BY id")
    built = build_sink(
        {"table": "mem", "columns": ["id", "s"], "shards": [{"replicas": [front.url]}]}
    )
    pool = built.sink
    pool.start()
    connector = pool._connector  # the sink's own connector, as the pool's workers use it
    writer = connector.open_writer(0, 0, front.url)
    gc.collect()
    gc.disable()
    try:
        for n in range(BATCHES):
            buffer = connector.new_buffer(0)
            for i in range(ROWS):
                buffer.append((n * ROWS + i, f"row {i}"))
            writer.write(WriteBatch(buffer, ROWS, 0, 0, 1, f"mem-run-0-{n}", 1))
        contexts = [o for o in gc.get_objects() if type(o).__name__ == "InsertContext"]
    finally:
        gc.enable()
    writer.close()
    pool.close()
    assert len(contexts) <= 1, f"{len(contexts)} insert contexts alive after {BATCHES} batches"
    assert client.query("SELECT count() FROM mem").result_rows[0][0] == BATCHES * ROWS
