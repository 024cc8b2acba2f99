"""``ctx.chain(meta=True)``: operators see where each record came from."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from spate import AckToken, Lane, Pipeline
from spate.metrics import Meter
from spate.ops import compile_chain
from spate.records import Headers, MetaColumn, MetaSource, PayloadBatch, RecordMeta
from spate.testing import capture_sink, memory_source


class Utf8:
    many = False

    def deserialize(self, payload: memoryview) -> object:
        return bytes(payload).decode()


@pytest.mark.parametrize("interpreted", [False, True], ids=["generated", "interpreter"])
def test_meta_pairs_carry_lane_offset_key_and_timestamp(interpreted: bool) -> None:
    sink, script = capture_sink("out", max_rows=10)
    processor = compile_chain(
        lambda ctx: ctx.chain(meta=True).map(lambda pair: (pair[1], pair[0])).sink(),
        deserializer=Utf8(),
        sinks={"out": sink},
        meter=Meter("meta"),
        pipeline="meta",
        interpreted=interpreted,
    )
    lane = Lane("events", 3)
    batch = PayloadBatch(
        lane,
        [40, 41, 43],
        [memoryview(b"a"), memoryview(b"b"), memoryview(b"c")],
        [b"k1", None, b"k3"],
        [1000, 2000, 3000],
        44,
    )
    ack = AckToken(lane, 0, 0, 44, 3, lambda token: None)
    assert processor.process(batch, ack) is None
    sink.flush(float("inf"))
    assert script.rows == [
        (RecordMeta(lane, 40, b"k1", 1000), "a"),
        (RecordMeta(lane, 41, None, 2000), "b"),
        (RecordMeta(lane, 43, b"k3", 3000), "c"),
    ]


def test_meta_reaches_rows_through_a_whole_pipeline() -> None:
    source, handle = memory_source({0: [b"x", b"y"], 1: [b"z"]}, stream="orders")
    sink, script = capture_sink("out")

    def chains(ctx: Any) -> Any:
        return ctx.chain(meta=True).map(
            lambda pair: (pair[1].lane.partition, pair[1].offset, bytes(pair[0]))
        )

    report = Pipeline("meta-run", source, {"out": sink}, handle_signals=False).chains(chains).run()
    assert report.exit_code == 0
    assert sorted(script.rows) == [(0, 0, b"x"), (0, 1, b"y"), (1, 0, b"z")]
    assert handle.last_committed(0) == 2


def _headed_batch(lane: Lane) -> PayloadBatch:
    return PayloadBatch(
        lane,
        [40, 41, 43],
        [memoryview(b"a"), memoryview(b"b"), memoryview(b"c")],
        [b"k1", None, b"k3"],
        [1000, 2000, 3000],
        44,
        headers=[
            Headers([("tenant", b"t1"), ("tenant", b"t2")]),
            Headers(),
            Headers([("trace", b"\xff"), ("tenant", None)]),
        ],
    )


def _rows_of_headed_batch(chain: Any, sink: Any, script: Any, interpreted: bool) -> list[Any]:
    """Run ``chain`` into ``sink`` over :func:`_headed_batch`; the rows the sink wrote."""
    processor = compile_chain(
        chain,
        deserializer=Utf8(),
        sinks={"out": sink},
        meter=Meter("meta-h"),
        pipeline="meta-h",
        interpreted=interpreted,
    )
    lane = Lane("events", 3)
    ack = AckToken(lane, 0, 0, 44, 3, lambda token: None)
    assert processor.process(_headed_batch(lane), ack) is None
    sink.flush(float("inf"))
    return list(script.rows)


@pytest.mark.parametrize("interpreted", [False, True], ids=["generated", "interpreter"])
def test_b250_meta_carries_the_records_headers_and_topic(interpreted: bool) -> None:
    sink, script = capture_sink("out", max_rows=10)

    def chain(ctx: Any) -> Any:
        return (
            ctx.chain(meta=True)
            .map(lambda pair: (pair[1].topic, pair[1].headers.pairs, pair[1].headers.get("tenant")))
            .sink()
        )

    assert _rows_of_headed_batch(chain, sink, script, interpreted) == [
        ("events", (("tenant", b"t1"), ("tenant", b"t2")), b"t2"),
        ("events", (), None),
        ("events", (("trace", b"\xff"), ("tenant", None)), None),
    ]


# Every kind of metadata, at the positions after the row's one value.
META_COLUMNS = (
    MetaColumn("off", MetaSource("offset"), 1),
    MetaColumn("part", MetaSource("partition"), 2),
    MetaColumn("ts", MetaSource("timestamp"), 3),
    MetaColumn("ms", MetaSource("timestamp_ms"), 4),
    MetaColumn("topic", MetaSource("topic"), 5),
    MetaColumn("key", MetaSource("key"), 6),
    MetaColumn("raw", MetaSource("value"), 7),
    MetaColumn("tenant", MetaSource("header", "tenant"), 8),
)


def _expected() -> list[object]:
    utc = dt.UTC
    meta = [
        (40, 3, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=utc), 1000, "events", b"k1", b"a", b"t2"),
        (41, 3, dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=utc), 2000, "events", None, b"b", None),
        (43, 3, dt.datetime(1970, 1, 1, 0, 0, 3, tzinfo=utc), 3000, "events", b"k3", b"c", None),
    ]
    return [(value, *m) for value, m in zip("abc", meta, strict=True)]


@pytest.mark.parametrize("interpreted", [False, True], ids=["generated", "interpreter"])
@pytest.mark.parametrize("shape", ["tuple", "dict"])
def test_b252_a_sink_gets_its_metadata_columns_added_to_each_row(
    interpreted: bool, shape: str
) -> None:
    sink, script = capture_sink("out", max_rows=10)
    sink.meta_columns = META_COLUMNS  # type: ignore[attr-defined]
    as_row = (lambda v: (v,)) if shape == "tuple" else (lambda v: {"v": v})
    rows = _rows_of_headed_batch(
        lambda ctx: ctx.chain().map(as_row).sink(), sink, script, interpreted
    )
    if shape == "dict":
        names = ["v", *(c.name for c in META_COLUMNS)]
        rows = [tuple(r[n] for n in names) for r in rows]
    assert rows == _expected()
