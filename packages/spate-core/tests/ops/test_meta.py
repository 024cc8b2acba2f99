"""``ctx.chain(meta=True)``: operators see where each record came from."""

from __future__ import annotations

from typing import Any

import pytest
from spate import AckToken, Lane, Pipeline
from spate.metrics import Meter
from spate.ops import compile_chain
from spate.records import PayloadBatch, RecordMeta
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
