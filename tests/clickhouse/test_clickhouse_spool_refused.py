"""Rows the server refuses, behind a spool tier (B320-B323, B348 on the columnar path).

Against the HTTP front over chDB: a spool tier (``ack: spooled`` and ``ack: terminal``)
in front of a ClickHouse sink whose table has a ``CHECK`` constraint that refuses one row
among many. The sink bisects the spooled batch the spool hands on (B190); what becomes of
the refused row follows the sink's ``on_record_error`` and the spool's own bookkeeping
(what it has handed on for good, what it keeps) stays right across a restart.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

import pytest
from spate import Pipeline
from spate._clock import SystemClock
from spate.checkpoint._ack import AckStatus
from spate.config import DeadLetterSettings, decode
from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.errors import FatalError
from spate.metrics import Meter
from spate.sink import JsonlStore, SpoolConfig, SpoolTier
from spate.testing import capture_sink, memory_source

from tests.clickhouse.sinkkit import BuiltSink, Driver, build_sink, ids_on
from tests.support.chfront_fixtures import ChFront
from tests.support.scale import scaled

pytestmark = [pytest.mark.integration]

Ack = Literal["spooled", "terminal"]


@pytest.fixture(scope="module")
def front(chfront_module: Callable[..., ChFront]) -> Iterator[ChFront]:
    yield chfront_module()


def _table(front: ChFront, table: str, bad: int) -> Any:
    client = front.client()
    client.command(
        f"CREATE TABLE {table} (id UInt64, v Int64, CONSTRAINT good CHECK id != {bad}) "
        "ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000"
    )
    return client


def _sink(front: ChFront, table: str, policy: str) -> BuiltSink:
    """A new sink over ``table``; every run of one table is one pipeline, so a replayed
    spooled batch carries the dedup tokens of its first write (B56)."""
    return build_sink(
        {
            "table": table,
            "columns": ["id", "v"],
            "shards": [{"replicas": [front.url]}],
            "batch": {"max_rows": 100_000, "linger": "1h"},
            "retry": {"initial": "50ms", "max": "200ms", "max_attempts": 3},
            "on_record_error": policy,
        },
        pipeline=f"spooled-{table}",
    )


def _spool(directory: Path, built: BuiltSink, ack: Ack) -> SpoolTier:
    config = SpoolConfig(dir=str(directory), ack=ack, max_records=500)
    store = JsonlStore(config.dir, segment_bytes=config.segment_bytes)
    return SpoolTier("spooled", config, built.sink, store, meter=built.meter, clock=SystemClock())


def _rows(count: int) -> list[tuple[int, int]]:
    return [(i, i) for i in range(count)]


@pytest.mark.parametrize("ack", ["spooled", "terminal"])
def test_b320_under_skip_a_spooled_row_the_server_refuses_is_isolated_and_the_rest_written(
    front: ChFront, tmp_path: Path, ack: Ack, caplog: pytest.LogCaptureFixture
) -> None:
    table = f"spool_skip_{ack}"
    count = scaled(5_000, minimum=2_000)
    bad = count // 3
    client = _table(front, table, bad)
    built = _sink(front, table, "skip")
    spool = _spool(tmp_path / "spool", built, ack)
    spool.start()
    driver = Driver(spool, batch_rows=250)
    with caplog.at_level(logging.WARNING):
        driver.offer_all(_rows(count))
        assert driver.finish()
    spool.close()
    assert driver.all_delivered
    assert sorted(ids_on([client], table)) == [i for i in range(count) if i != bad]
    assert built.metric("spate_sink_server_rejected_rows_total", code="469", policy="skip") == 1
    assert "[code 469 VIOLATED_CONSTRAINT]" in caplog.text
    assert os.listdir(tmp_path / "spool") == []  # everything handed on for good (B54)


def test_b321_under_fail_with_ack_terminal_the_refused_batch_fails_its_source_batch(
    front: ChFront, tmp_path: Path
) -> None:
    table = "spool_fail_terminal"
    count = 2_000
    bad = 1_234
    client = _table(front, table, bad)
    built = _sink(front, table, "fail")
    spool = _spool(tmp_path / "spool", built, "terminal")
    spool.start()
    driver = Driver(spool, batch_rows=250)
    driver.offer_all(_rows(count))
    driver.finish(timeout=10)
    spool.close()
    # The source batch of the refused row fails: no commit passes it (B4, B5).
    assert AckStatus.FAILED in driver.statuses
    assert bad not in set(ids_on([client], table))


def test_b322_under_fail_with_ack_spooled_the_spool_keeps_the_batch_stops_and_says_so(
    front: ChFront, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The rows were acknowledged once spooled, so `fail` cannot hold the offsets back:
    the spool keeps the refused batch, hands nothing after it on, and the pipeline stops
    (a ``FatalError`` at the next tick or flush) naming the batch. A restart replays it
    and stops again; a restart under ``skip`` writes every other row once and empties
    the spool."""
    table = "spool_fail_spooled"
    count = 2_000
    bad = 1_234  # in the third spooled batch of 500
    client = _table(front, table, bad)
    directory = tmp_path / "spool"
    built = _sink(front, table, "fail")
    spool = _spool(directory, built, "spooled")
    spool.start()
    driver = Driver(spool, batch_rows=250)
    with caplog.at_level(logging.ERROR):
        driver.offer_all(_rows(count))
        assert driver.all_delivered  # acknowledged once fsynced (B54)
        with pytest.raises(FatalError, match="on_record_error: fail"):
            driver.finish(timeout=30)
    spool.close()
    assert "for good" in caplog.text and "stops handing on" in caplog.text
    assert bad not in set(ids_on([client], table))
    assert os.listdir(directory)  # the refused batch stays in the spool

    # A restart under `fail` meets the same refusal and stops again, keeping the batch.
    again = _spool(directory, _sink(front, table, "fail"), "spooled")
    with pytest.raises(FatalError, match="on_record_error: fail"):
        again.start()
        assert not again.flush(_deadline(30))
    again.close()
    assert os.listdir(directory)

    # Under `skip` the restart drains the spool: every good row once, the bad one never.
    built = _sink(front, table, "skip")
    last = _spool(directory, built, "spooled")
    last.start()
    assert last.flush(_deadline(60))
    last.close()
    assert sorted(ids_on([client], table)) == [i for i in range(count) if i != bad]
    assert os.listdir(directory) == []


PER_PARTITION = 1_500
BAD = 1_000_700  # partition 1's record 700


class SpooledRun(NamedTuple):
    """A pipeline of :func:`spooled_pipeline`, its source's handle and its sink."""

    pipeline: Pipeline
    handle: Any
    built: BuiltSink


def spooled_pipeline(
    name: str,
    url: str,
    data: dict[int, list[bytes]],
    policy: str,
    directory: Path,
    ack: Ack | None,
    drain: float = 30.0,
    **pipeline: Any,
) -> SpooledRun:
    """A pipeline ``name`` (memory source over ``data`` on topic ``orders``, ``pipeline``'s
    chains, deserializer or dead letters) into a ClickHouse sink on ``url`` writing table
    ``name`` (``-`` as ``_``) under ``policy``, behind a spool over ``directory`` with
    ``ack`` unless None."""
    table = name.replace("-", "_")
    source, handle = memory_source(data, stream="orders", batch_size=250)
    budget = Pipeline.new_budget(BackpressureConfig())
    meter = Meter(name)
    built = build_sink(
        {
            "table": table,
            "columns": ["id", "v"],
            "shards": [{"replicas": [url]}],
            "batch": {"max_rows": 100_000, "linger": "100ms"},
            "retry": {"initial": "50ms", "max": "200ms", "max_attempts": 2},
            "on_record_error": policy,
        },
        pipeline=name,
        meter=meter,
        budget=budget,
    )
    sink = built.sink if ack is None else _spool(directory, built, ack)
    chains = pipeline.pop("chains", None)
    run = Pipeline(
        name,
        source,
        {"events": sink},
        checkpoint=CheckpointConfig(interval=0.1, drain_timeout=drain),
        budget=budget,
        meter=meter,
        handle_signals=False,
        **pipeline,
    )
    if chains is not None:
        run.chains(chains)
    return SpooledRun(run, handle, built)


def _dead_letter_run(
    front: ChFront, tmp_path: Path, ack: Ack, name: str, payload: bytes, **pipeline: Any
) -> dict[str, Any]:
    """A pipeline (memory source, ``pipeline``'s chain or deserializer, spool, ClickHouse
    sink under ``dead_letter``) over two partitions of ids ``payload % id``, the table
    refusing :data:`BAD`: checks every other row written once, every offset committed,
    the refusal counted and the spool emptied; the one dead letter."""
    table = name.replace("-", "_")
    client = _table(front, table, BAD)
    data = {p: [payload % (p * 1_000_000 + i) for i in range(PER_PARTITION)] for p in range(2)}
    directory = tmp_path / "spool"
    dlq, letters = capture_sink("dead_letter")
    run, handle, built = spooled_pipeline(
        name,
        front.url,
        data,
        "dead_letter",
        directory,
        ack,
        dead_letter=dlq,
        dead_letter_settings=DeadLetterSettings(format="row"),
        **pipeline,
    )
    report = run.run()
    assert report.exit_code == 0, report.summary()
    ids = [p * 1_000_000 + i for p in data for i in range(PER_PARTITION)]
    assert sorted(ids_on([client], table)) == sorted(i for i in ids if i != BAD)
    assert handle.committed == {handle.lane(p): PER_PARTITION for p in data}
    assert (
        built.metric("spate_sink_server_rejected_rows_total", code="469", policy="dead_letter") == 1
    )
    assert os.listdir(directory) == []
    (letter,) = letters.rows
    assert (letter["source_topic"], letter["source_partition"]) == ("orders", 1)
    # The spool keeps each row's source offset with it (B424).
    assert letter["source_offset"] == BAD % 1_000_000
    assert letter["error_stage"] == "sink"
    assert "[code 469 VIOLATED_CONSTRAINT]" in letter["error_message"]
    assert "good" in letter["error_message"]  # the server's message names the constraint
    return dict(letter)


@pytest.mark.parametrize("ack", ["spooled", "terminal"])
def test_b323_under_dead_letter_a_spooled_row_the_server_refuses_is_dead_lettered(
    front: ChFront, tmp_path: Path, ack: Ack
) -> None:
    """A pipeline (memory source, chain, spool, ClickHouse sink under ``dead_letter``):
    the refused row's dead letter carries the row as the spool kept it, its key and
    lane, and the server's code and message; every other row is written once, every
    offset committed and the spool emptied."""

    def chains(ctx: Any) -> Any:
        return ctx.chain().map(lambda v: (int(bytes(v)), 7)).sink("events")

    letter = _dead_letter_run(front, tmp_path, ack, f"spool-dl-{ack}", b"%d", chains=chains)
    assert letter["payload"] == f"[{BAD},7]"


def _deadline(seconds: float) -> float:
    return SystemClock().monotonic() + seconds


@pytest.mark.parametrize("ack", ["spooled", "terminal"])
def test_b348_under_dead_letter_a_spooled_frame_row_the_server_refuses_is_dead_lettered(
    front: ChFront, tmp_path: Path, ack: Ack
) -> None:
    """B323 on the columnar path: JSON decoded to frames, spooled as Arrow, handed to a
    ClickHouse sink under ``dead_letter``. The refused row's dead letter carries the row
    as the spool kept it (a JSON object of its columns), its lane, and the server's code
    and message; every other row is written once, every offset committed and the spool
    emptied (B348)."""
    from spate_json import JsonConfig, JsonDeserializerFactory

    from tests.clickhouse.columnar_values import deser_context

    name = f"spool-frame-dl-{ack}"
    config = decode(JsonConfig, {}, "deserializer.json")
    deserializer = JsonDeserializerFactory.build(config, deser_context(name))
    payload = b'{"id": %d, "v": 7}'
    letter = _dead_letter_run(front, tmp_path, ack, name, payload, deserializer=deserializer)
    assert json.loads(letter["payload"]) == {"id": BAD, "v": 7}
