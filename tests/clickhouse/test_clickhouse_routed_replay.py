"""Templated targets under ``delivery: effectively_once`` on the ClickHouse HTTP front
(B294, B295, ADR 0024): each target's part of a block is inserted with the block's token
and the target, so a later run replaying from an older offset with other batch sizes
leaves every record once in its own target (plain ``MergeTree``, no ``FINAL``); and a
target that does not exist under ``create_table: off`` follows ``on_record_error``
(B292)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from spate import AckToken
from spate.errors import ErrorPolicy
from spate.metrics._meter import Meter
from spate.ops import compile_chain
from spate.records import Headers, PayloadBatch

from tests.clickhouse.sinkkit import build_sink
from tests.clickhouse.test_clickhouse_effectively_once import eo_sink
from tests.clickhouse.test_clickhouse_meta_replay import (
    LANE,
    IntDeser,
    feed,
    offsets_batch,
)
from tests.support.chfront_fixtures import ChFront
from tests.support.services import unique_name

pytestmark = [pytest.mark.integration]

COLUMNS: list[Any] = [{"id": "UInt64"}, {"kind": "String"}, {"tenant": "$header.tenant"}]
KINDS = 5


def _batch(first: int, stop: int, prefix: str) -> PayloadBatch:
    def headers(offset: int) -> Headers:
        return Headers([("tenant", b"%s%d" % (prefix.encode(), offset % 3))])

    return offsets_batch(first, stop, headers)


def _run(front: ChFront, prefix: str, first: int, stop: int, **extra: Any) -> Any:
    sink, position = eo_sink(
        front,
        "ev_{kind}",
        database="tenant_{$header.tenant}",
        columns=COLUMNS,
        create_table="if_missing",
        table_options={"order_by": ["id"], "dedup_window": 1000},
        **extra,
    )
    sink.start()
    processor = compile_chain(
        lambda ctx: ctx.chain().map(lambda v: (v, f"k{v % KINDS}")).sink(),
        deserializer=IntDeser(),
        sinks={"events": sink},
        meter=Meter("eo-route"),
        pipeline="eo",
        position=position,
        record_policy=ErrorPolicy.SKIP,
    )
    feed(processor, sink, lambda: _batch(first, stop, prefix), first, stop)
    return sink


def _offer_kinds(sink: Any, count: int) -> None:
    """Offer rows ``(i, "k0" or "k1")`` for ``i`` below ``count`` under one ack, release
    it and flush ``sink``."""
    ack = AckToken(LANE, 0, 0, count, count, lambda t: None)
    for i in range(count):
        sink.offer((i, f"k{i % 2}"), None, LANE, ack)
    ack.release()
    assert sink.flush(time.monotonic() + 60)


def test_b295_a_replay_writes_each_record_once_in_its_own_target_b294(chfront: Any) -> None:
    front: ChFront = chfront()
    client = front.client()
    prefix = unique_name("r").replace("-", "")[:9] + "_"
    _run(front, prefix, 0, 30)
    # A later run replays from offset 7 (a commit that never happened), other batch sizes.
    _run(front, prefix, 7, 45, batch={"max_rows": 1000, "linger": "1h"})
    for tenant in range(3):
        for kind in range(KINDS):
            ids = [
                r[0]
                for r in client.query(
                    f"SELECT id FROM tenant_{prefix}{tenant}.ev_k{kind} ORDER BY id"
                ).result_rows
            ]
            assert ids == [i for i in range(45) if i % 3 == tenant and i % KINDS == kind]


def test_b292_a_target_that_does_not_exist_is_skipped_and_named(
    chfront: Any, caplog: pytest.LogCaptureFixture
) -> None:
    front: ChFront = chfront()
    client = front.client()
    table = unique_name("only").replace("-", "_")
    client.command(
        f"CREATE TABLE {table}_k1 (id UInt64, kind String) ENGINE = MergeTree ORDER BY id"
    )
    sink = build_sink(
        {
            "table": table + "_{kind}",
            "columns": [{"id": "UInt64"}, {"kind": "String"}],
            "shards": [{"replicas": [front.url]}],
            "on_record_error": "skip",
        }
    ).sink
    sink.start()
    with caplog.at_level(logging.WARNING):
        _offer_kinds(sink, 4)
    sink.close()
    assert [r[0] for r in client.query(f"SELECT id FROM {table}_k1 ORDER BY id").result_rows] == [
        1,
        3,
    ]
    assert f"2 row(s) of batch 1 for target {table}_k0 cannot be written" in caplog.text
    assert "does not exist" in caplog.text


def test_b297_a_row_the_server_refuses_in_a_target_is_named_at_its_place_in_the_batch(
    chfront: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A target's part is bisected on its own; the row it refuses is reported (and, under
    ``dead_letter``, charged) at its position in the pool's batch, not in the part."""
    front: ChFront = chfront()
    client = front.client()
    table = unique_name("chk").replace("-", "_")
    for kind in ("k0", "k1"):
        client.command(
            f"CREATE TABLE {table}_{kind} (id UInt64, kind String, "
            "CONSTRAINT not_five CHECK id != 5) ENGINE = MergeTree ORDER BY id"
        )
    sink = build_sink(
        {
            "table": table + "_{kind}",
            "columns": [{"id": "UInt64"}, {"kind": "String"}],
            "shards": [{"replicas": [front.url]}],
            "on_record_error": "skip",
            "batch": {"max_rows": 10, "linger": "1h"},
        }
    ).sink
    sink.start()
    with caplog.at_level(logging.WARNING):
        _offer_kinds(sink, 10)
    sink.close()
    held = client.query(f"SELECT id FROM {table}_k1 ORDER BY id").result_rows
    assert [r[0] for r in held] == [1, 3, 7, 9]
    # Row 5 is the third row of target k1's part, the sixth of the batch.
    assert "refused 1 row(s) of batch 1 on their own (rows 5;" in caplog.text, caplog.text
