"""A row the server refuses under ``skip`` is logged at its own source position (B349, B420-B424).

Against the HTTP front over chDB: a pipeline (memory source over two partitions, a
ClickHouse sink whose table has a ``CHECK`` constraint refusing one record among
thousands, ``on_record_error: skip``), on the row path and the columnar path, straight
into the sink and behind a spool tier. The skip log names the refused record's topic,
partition and offset — not only its row in the pool's batch — and the run summary counts
it as a record dropped for a record error; every other row is written once and every
offset committed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from spate.config import decode

from tests.clickhouse.sinkkit import ids_on
from tests.clickhouse.test_clickhouse_spool_refused import Ack, _table, spooled_pipeline
from tests.support.chfront_fixtures import ChFront

pytestmark = [pytest.mark.integration]

PER_PARTITION = 1_500
BAD_PARTITION = 1
BAD_OFFSET = 700
BAD = BAD_PARTITION * 1_000_000 + BAD_OFFSET
ROW = b"%d"
JSON = b'{"id": %d, "v": 7}'


@pytest.fixture(scope="module")
def front(chfront_module: Callable[..., ChFront]) -> Iterator[ChFront]:
    yield chfront_module()


def _row_chain(ctx: Any) -> Any:
    return ctx.chain().map(lambda v: (int(bytes(v)), 7)).sink("events")


def _json_deserializer(name: str) -> Any:
    from spate_json import JsonConfig, JsonDeserializerFactory

    from tests.clickhouse.columnar_values import deser_context

    return JsonDeserializerFactory.build(
        decode(JsonConfig, {}, "deserializer.json"), deser_context(name)
    )


def _skip_run(
    front: ChFront,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    name: str,
    columnar: bool,
    ack: Ack | None,
) -> str:
    """Run the pipeline under ``skip`` (behind a spool with ``ack`` unless None); check
    every other row written once, every offset committed, and the refused record named
    by its position in the skip log; return the run summary."""
    table = name.replace("-", "_")
    client = _table(front, table, BAD)
    payload = JSON if columnar else ROW
    data = {p: [payload % (p * 1_000_000 + i) for i in range(PER_PARTITION)] for p in range(2)}
    directory = tmp_path / "spool"
    extra: dict[str, Any] = (
        {"deserializer": _json_deserializer(name)} if columnar else {"chains": _row_chain}
    )
    run, handle, built = spooled_pipeline(name, front.url, data, "skip", directory, ack, **extra)
    with caplog.at_level(logging.WARNING):
        report = run.run()
    assert report.exit_code == 0, report.summary()
    _written_once(client, table, data)
    assert handle.committed == {handle.lane(p): PER_PARTITION for p in data}
    assert built.metric("spate_sink_server_rejected_rows_total", code="469", policy="skip") == 1
    if ack is not None:
        assert os.listdir(directory) == []
    _named(caplog)
    return report.summary()


def _written_once(client: Any, table: str, data: dict[int, list[bytes]]) -> None:
    ids = [p * 1_000_000 + i for p in data for i in range(PER_PARTITION)]
    assert sorted(ids_on([client], table)) == sorted(i for i in ids if i != BAD)


def _named(caplog: pytest.LogCaptureFixture) -> None:
    """The skip log has one line for the refused record, naming its position."""
    skipped = [
        r.getMessage()
        for r in caplog.records
        if r.name == "spate.ops.skipped" and "record_error" in r.getMessage()
    ]
    (line,) = skipped
    assert f"orders[{BAD_PARTITION}] offset {BAD_OFFSET}" in line, line
    assert "[code 469 VIOLATED_CONSTRAINT]" in line, line


def _counted(summary: str) -> None:
    assert "dropped=1 (record_error=1)" in summary, summary


def test_b349_under_skip_a_refused_row_is_logged_under_its_record_position(
    front: ChFront, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Row path, no spool: the skip log names topic, partition and offset (B349)."""
    _counted(_skip_run(front, tmp_path, caplog, "skippos-rows", columnar=False, ack=None))


def test_b420_under_skip_a_refused_frame_row_is_logged_under_its_record_position(
    front: ChFront, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Columnar path, no spool: the skip log names topic, partition and offset (B420)."""
    _counted(_skip_run(front, tmp_path, caplog, "skippos-frames", columnar=True, ack=None))


@pytest.mark.parametrize("columnar", [False, True], ids=["rows", "frames"])
@pytest.mark.parametrize("ack", ["spooled", "terminal"])
def test_b421_behind_a_spool_a_refused_row_is_logged_under_its_record_position(
    front: ChFront, tmp_path: Path, caplog: pytest.LogCaptureFixture, ack: Ack, columnar: bool
) -> None:
    """Behind a spool (``ack: spooled`` and ``terminal``), on both paths: the spool keeps
    each row's source offset in its segments, so the skip log names the refused
    record's topic, partition and offset as without a spool (B421)."""
    name = f"skippos-spool-{ack}-{'frames' if columnar else 'rows'}"
    _counted(_skip_run(front, tmp_path, caplog, name, columnar=columnar, ack=ack))


def test_b422_a_replayed_spooled_row_the_server_refuses_is_logged_under_its_position(
    front: ChFront, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A first run spools every record (``ack: spooled``) while its ClickHouse endpoint is
    unreachable and stops without handing them on; a second run over the same spool
    directory replays them to the server, which refuses one: its skip log names the
    record's topic, partition and offset, spooled by the first run (B422)."""
    name = "skippos-replay"
    table = name.replace("-", "_")
    client = _table(front, table, BAD)
    data = {p: [ROW % (p * 1_000_000 + i) for i in range(PER_PARTITION)] for p in range(2)}
    directory = tmp_path / "spool"

    def run(url: str, source_data: dict[int, list[bytes]], drain: float) -> Any:
        return spooled_pipeline(
            name, url, source_data, "skip", directory, "spooled", drain, chains=_row_chain
        )

    first = run("http://127.0.0.1:9", data, drain=1.0)  # nothing listens there
    first.pipeline.run()
    handle = first.handle
    assert handle.committed == {handle.lane(p): PER_PARTITION for p in data}  # spooled
    assert os.listdir(directory)  # kept for the next run
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        report = run(front.url, {p: [] for p in data}, drain=30.0).pipeline.run()
    assert report.exit_code == 0, report.summary()
    _written_once(client, table, data)
    assert os.listdir(directory) == []
    _named(caplog)
