"""Run payloads through a compiled chain's deserializer stage and read its counters.

For deserializer fuzz tests: every payload must end as ``ok`` or ``skipped`` in
``spate_deser_records_total`` (B28), and every ``ok`` must reach the sink.
"""

from __future__ import annotations

from typing import NamedTuple

from spate import AckToken, Lane, PayloadBatch
from spate.metrics._meter import Meter
from spate.ops import compile_chain
from spate.sink import Offer


class StageCounts(NamedTuple):
    rows: list[object]
    """Rows the sink was offered."""
    ok: float
    skipped: float
    empty: float
    """Payloads that held no record (``NO_RECORD``)."""


class _TakeAll:
    """A sink that accepts every row (only ``offer`` is used by a compiled chain)."""

    def __init__(self) -> None:
        self.rows: list[object] = []

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        self.rows.append(row)
        return Offer.ACCEPTED


def through_stage(deserializer: object, payloads: list[bytes]) -> StageCounts:
    """Process one batch of ``payloads`` with ``deserializer`` and no operators."""
    sink = _TakeAll()
    meter = Meter("fuzz")
    processor = compile_chain(
        None, deserializer=deserializer, sinks={"out": sink}, meter=meter, pipeline="fuzz"
    )
    lane = Lane("fuzz", 0)
    ack = AckToken(lane, 0, 0, len(payloads), len(payloads), lambda token: None)
    views = [memoryview(p) for p in payloads]
    batch = PayloadBatch(
        lane, list(range(len(views))), views, [None] * len(views), [0] * len(views), len(views)
    )
    assert processor.process(batch, ack) is None

    def count(outcome: str) -> float:
        labels = {
            "pipeline": "fuzz",
            "component": "deserializer",
            "component_type": "deserializer",
            "outcome": outcome,
        }
        return meter.registry.get_sample_value("spate_deser_records_total", labels) or 0.0

    return StageCounts(sink.rows, count("ok"), count("skipped"), count("empty"))
