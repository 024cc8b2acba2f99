"""Rows the server refuses are isolated, the rest is written (B190, B191, B193).

Against the HTTP front over chDB: a ``CHECK`` constraint, a ``MATERIALIZED`` column the
server computes from a value the client cannot check, and one bad row among 100,000
(scaled with ``SPATE_TEST_SCALE``); on the row path through the pool, and on the frame
path through the writer. ``tests/clickhouse/chdb_child.py`` (mode ``isolate``) runs the
same on a ``chdb://`` replica.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from spate.errors import ErrorClass, SinkError
from spate.sink import RowsRefused, WriteBatch

from tests.clickhouse.sinkkit import Driver, build_sink, ids_on
from tests.support.chfront_fixtures import ChFront
from tests.support.scale import scaled

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def front(chfront_module: Callable[..., ChFront]) -> Iterator[ChFront]:
    yield chfront_module()


def _checked(front: ChFront, table: str) -> Any:
    client = front.client()
    client.command(
        f"CREATE TABLE {table} (id UInt64, v Int64, CONSTRAINT positive CHECK v >= 0) "
        "ENGINE = MergeTree ORDER BY id"
    )
    return client


def _body(front: ChFront, table: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "table": table,
        "columns": ["id", "v"],
        "shards": [{"replicas": [front.url]}],
        "batch": {"max_rows": 1_000_000, "linger": "1h"},
        "retry": {"initial": "50ms", "max": "200ms", "max_attempts": 3},
        "on_record_error": "skip",
    }
    body.update(extra)
    return body


def test_b190_rows_a_check_constraint_refuses_are_skipped_and_the_rest_written(
    front: ChFront, caplog: pytest.LogCaptureFixture
) -> None:
    client = _checked(front, "iso_check")
    bad = {17, 18, 555, 999}
    rows = [(i, -i if i in bad else i) for i in range(1000)]
    built = build_sink(_body(front, "iso_check"))
    built.sink.start()
    driver = Driver(built.sink, batch_rows=250)
    with caplog.at_level(logging.WARNING):
        driver.offer_all(rows)
        assert driver.finish()
    built.sink.close()
    assert driver.all_delivered  # skipped rows are accounted for: the offsets may pass
    assert sorted(ids_on([client], "iso_check")) == [i for i in range(1000) if i not in bad]
    assert built.metric("spate_sink_server_rejected_rows_total", code="469", policy="skip") == len(
        bad
    )
    logged = caplog.text
    assert "[code 469 VIOLATED_CONSTRAINT]" in logged and "positive" in logged


def test_b190_a_value_only_the_server_can_refuse_is_isolated(front: ChFront) -> None:
    """A MATERIALIZED column parses a String the client sends as any other string."""
    client = front.client()
    client.command(
        "CREATE TABLE iso_parse (id UInt64, s String, n UInt32 MATERIALIZED toUInt32(s)) "
        "ENGINE = MergeTree ORDER BY id"
    )
    rows = [(i, "not a number" if i == 321 else str(i)) for i in range(2000)]
    built = build_sink(_body(front, "iso_parse", columns=["id", "s"]))
    built.sink.start()
    driver = Driver(built.sink)
    driver.offer_all(rows)
    assert driver.finish()
    built.sink.close()
    assert driver.all_delivered
    assert sorted(ids_on([client], "iso_parse")) == [i for i in range(2000) if i != 321]
    assert built.metric("spate_sink_server_rejected_rows_total", code="6", policy="skip") == 1


def test_b191_one_bad_row_among_many_costs_about_two_inserts_per_level(front: ChFront) -> None:
    client = _checked(front, "iso_many")
    count = scaled(100_000, minimum=10_000)
    bad = count * 2 // 3
    rows = [(i, -1 if i == bad else i) for i in range(count)]
    built = build_sink(_body(front, "iso_many"))
    built.sink.start()
    driver = Driver(built.sink, batch_rows=count)
    driver.offer_all(rows)
    assert driver.finish()
    built.sink.close()
    assert driver.all_delivered
    got = ids_on([client], "iso_many")
    assert len(got) == count - 1 and bad not in set(got)
    inserts = built.metric("spate_sink_isolate_inserts_total")
    assert 0 < inserts <= 2 * math.ceil(math.log2(count))


def test_b191_past_isolate_max_inserts_the_block_fails_as_before(front: ChFront) -> None:
    client = _checked(front, "iso_cap")
    rows = [(i, -1 if i % 100 == 7 else i) for i in range(1000)]  # ten bad rows
    built = build_sink(_body(front, "iso_cap", isolate_max_inserts=8))
    built.sink.start()
    driver = Driver(built.sink, batch_rows=1000)
    driver.offer_all(rows)
    driver.finish()
    built.sink.close()
    assert driver.statuses and not driver.all_delivered  # never committed past them
    assert built.metric("spate_sink_server_rejected_rows_total", code="469", policy="skip") == 0
    assert built.metric("spate_sink_errors_total", shard="0", error_class="fatal") == 1
    assert len(ids_on([client], "iso_cap")) < 990  # stopped short of the search


def test_b190_under_fail_the_batch_fails_naming_the_rows_and_the_rest_is_written(
    front: ChFront, caplog: pytest.LogCaptureFixture
) -> None:
    client = _checked(front, "iso_fail")
    rows = [(i, -1 if i == 42 else i) for i in range(500)]
    built = build_sink(_body(front, "iso_fail", on_record_error="fail"))
    built.sink.start()
    driver = Driver(built.sink, batch_rows=500)
    with caplog.at_level(logging.ERROR):
        driver.offer_all(rows)
        driver.finish()
    built.sink.close()
    assert driver.statuses and not driver.all_delivered
    assert sorted(ids_on([client], "iso_fail")) == [i for i in range(500) if i != 42]
    assert "refused 1 row(s) of batch" in caplog.text and "rows 42;" in caplog.text


def test_b193_frames_the_server_refuses_are_bisected_like_rows(front: ChFront) -> None:
    import pyarrow as pa

    client = _checked(front, "iso_frames")
    built = build_sink(_body(front, "iso_frames"))
    built.sink.start()
    connector = built.sink._connector  # the sink's own connector, as its workers use it
    writer = connector.open_writer(0, 0, front.url)
    buffer = connector.new_buffer(0)
    for start in (0, 300):
        ids = list(range(start, start + 300))
        values = [-1 if i in (5, 444) else i for i in ids]
        buffer.append_frame(
            pa.table({"id": pa.array(ids, pa.uint64()), "v": pa.array(values, pa.int64())})
        )
    batch = WriteBatch(buffer, 600, 0, 0, 1, "frames-token", 1)
    # Under skip the write names the refused rows, for the pool to log them under their
    # records' positions (B349); the rest is written.
    for _ in range(2):  # then a retry of the same batch: its sub-blocks deduplicate
        with pytest.raises(RowsRefused) as refused:
            writer.write(batch)
        assert refused.value.skipped
        assert [row.row for row in refused.value.rows] == [5, 444]
    writer.close()
    built.sink.close()
    assert built.metric("spate_sink_server_rejected_rows_total", code="469", policy="skip") == 4
    got = ids_on([client], "iso_frames")
    assert sorted(set(got)) == [i for i in range(600) if i not in (5, 444)]


def test_b190_a_transport_error_is_retried_not_isolated(front: ChFront) -> None:
    client = _checked(front, "iso_transport")
    built = build_sink(_body(front, "iso_transport", retry={"initial": "50ms", "max": "200ms"}))
    built.sink.start()
    front.inject("5xx", seconds=1.0)
    driver = Driver(built.sink)
    driver.offer_all([(i, i) for i in range(100)])
    assert driver.finish()
    built.sink.close()
    front.recover()
    assert driver.all_delivered
    assert sorted(ids_on([client], "iso_transport")) == list(range(100))
    assert built.metric("spate_sink_isolate_inserts_total") == 0


def test_b190_rows_refused_on_a_chdb_replica_are_isolated(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.clickhouse.chdb_child", "isolate", str(tmp_path / "ch")],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == '{"rows": 997, "rejected": 3}'


def test_b190_isolation_off_fails_the_block_at_once(front: ChFront) -> None:
    _checked(front, "iso_off")
    built = build_sink(_body(front, "iso_off", isolate_max_inserts=0))
    built.sink.start()
    writer = built.sink._connector.open_writer(0, 0, front.url)
    buffer = built.sink._connector.new_buffer(0)
    buffer.append((1, -1))
    buffer.append((2, 2))
    with pytest.raises(SinkError) as caught:
        writer.write(WriteBatch(buffer, 2, 0, 0, 1, "off-token", 1))
    writer.close()
    built.sink.close()
    assert caught.value.error_class is ErrorClass.FATAL
    assert "code 469 VIOLATED_CONSTRAINT" in caught.value.reason
