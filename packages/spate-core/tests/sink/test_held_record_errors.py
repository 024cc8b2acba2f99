"""A row a tier or a tee held, then found bad, is its own record's error (B58, B28, B111).

A tee branch that refuses a row for room keeps it in a backlog, and a memory tier holds
rows until it hands them on; neither knows yet whether the next sink can encode the
row. When the next sink later refuses the held row as bad, the record error policy
(``skip``, ``fail``, ``dead_letter``) applies to that row's own record — its batch and
position, once — never to the record the chain happens to be offering, and the row
leaves the backlog, so nothing wedges and the good records are delivered and committed.

The pipelines run on a manual clock over real sink pools (inline writes): a terminal of
one row per batch and one batch in flight refuses the second row for room; the scripted
endpoint then refuses the bad row as unencodable.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from spate import AckStatus, AckToken, ErrorPolicy, ManualClock
from spate.config import DeadLetterSettings
from spate.config.models import CheckpointConfig
from spate.metrics import Meter
from spate.pipeline import Pipeline
from spate.records import Lane
from spate.sink import (
    BatchConfig,
    InflightConfig,
    MemoryTier,
    MemoryTierConfig,
    Offer,
    PoolConfig,
    TeeSink,
)
from spate.testing import capture_sink, memory_source, scripted_pool

BAD = b"bad"
# Partition 0's second record is the bad one: the first row fills the tight terminal,
# so the bad row is the first one held back for room.
DATA = {
    0: [b"p0-0", BAD, b"p0-2", b"p0-3", b"p0-4", b"p0-5"],
    1: [b"p1-0", b"p1-1", b"p1-2", b"p1-3"],
}
GOOD = sorted(row for rows in DATA.values() for row in rows if row != BAD)


def _pool(name: str, clock: ManualClock, meter: Meter, policy: ErrorPolicy, *, tight: bool) -> Any:
    config = PoolConfig(
        batch=BatchConfig(max_rows=1 if tight else 1000),
        inflight=InflightConfig(max_per_shard=1 if tight else 4),
        on_record_error=policy,
    )
    return scripted_pool(name, clock=clock, meter=meter, pipeline="held", config=config)


class _FullAtFirst:
    """A dead-letter sink that refuses its first ``refusals`` offers for room."""

    def __init__(self, sink: Any, refusals: int) -> None:
        self._sink = sink
        self.name = sink.name
        self.refusals = refusals

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        if self.refusals:
            self.refusals -= 1
            return Offer.REJECTED
        result: Offer = self._sink.offer(row, key, lane, ack)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sink, name)


def _run(
    policy: ErrorPolicy, shape: str, *, dlq_refusals: int = 0
) -> tuple[Any, Any, dict[str, list[object]], Any, Meter, Any]:
    """Run a pipeline over ``shape`` (``tee`` or ``memory``); return its report, source
    handle, rows written per terminal, dead letters, meter and the refusing endpoints."""
    clock = ManualClock()
    meter = Meter("held")
    source, handle = memory_source(DATA, batch_size=3)
    tight, ends = _pool("tight", clock, meter, policy, tight=True)
    ends.reject(lambda row: row == BAD)
    written: dict[str, Any] = {"tight": ends}
    sink: Any
    if shape == "tee":
        other, other_ends = _pool("other", clock, meter, policy, tight=False)
        written["other"] = other_ends
        sink = TeeSink("both", [other, tight], clock=clock, meter=meter)
    else:
        sink = MemoryTier("mem", MemoryTierConfig(max_records=2), tight, meter=meter, clock=clock)
    dlq, dlq_script = capture_sink("dead_letter", clock=clock)
    extra: dict[str, Any] = {}
    if policy is ErrorPolicy.DEAD_LETTER:
        extra = {
            "dead_letter": _FullAtFirst(dlq, dlq_refusals) if dlq_refusals else dlq,
            "dead_letter_settings": DeadLetterSettings(format="row"),
        }
    pipeline = Pipeline(
        "held",
        source,
        {"out": sink},
        clock=clock,
        meter=meter,
        checkpoint=CheckpointConfig(interval=0.5, drain_timeout=30.0),
        handle_signals=False,
        **extra,
    )
    report = pipeline.run()
    rows = {name: list(e.rows()) for name, e in written.items()}
    return report, handle, rows, dlq_script, meter, ends


def _dropped(meter: Meter) -> float:
    value = meter.registry.get_sample_value(
        "spate_operator_dropped_total",
        {
            "pipeline": "held",
            "component": "chain",
            "component_type": "operators",
            "reason": "record_error",
        },
    )
    return 0.0 if value is None else value


def _all_committed(handle: Any) -> dict[Lane, int]:
    return {handle.lane(p): len(rows) for p, rows in DATA.items()}


@pytest.mark.parametrize("shape", ["tee", "memory"])
def test_b111_a_held_row_found_bad_is_skipped_as_its_own_record(
    shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="spate.ops.skipped"):
        report, handle, rows, _, meter, _ = _run(ErrorPolicy.SKIP, shape)
    assert report.exit_code == 0, report.summary()
    # Every good record reached every terminal; only the bad row is missing, once.
    assert sorted(rows["tight"]) == GOOD  # type: ignore[type-var]
    if shape == "tee":
        # The branch that took the bad row writes it: the error was the other branch's.
        assert sorted(rows["other"]) == sorted([*GOOD, BAD])  # type: ignore[type-var]
    assert _dropped(meter) == 1
    # The skip names the bad row's own position, never the record offered at the time.
    assert "record_error) at memory[0] offset 1: cannot encode" in caplog.text
    assert "offset 2" not in caplog.text
    assert handle.committed == _all_committed(handle)


@pytest.mark.parametrize("shape", ["tee", "memory"])
def test_b111_a_held_row_found_bad_fails_the_run_naming_its_own_record(shape: str) -> None:
    report, handle, rows, _, _, _ = _run(ErrorPolicy.FAIL, shape)
    assert report.exit_code == 1
    assert "the record at memory[0] offset 1:" in report.reason, report.reason
    assert "on_record_error is fail" in report.reason
    assert "\n" not in report.reason
    assert BAD not in rows["tight"]
    # Nothing of partition 0 is committed past the bad record's batch.
    assert handle.committed.get(handle.lane(0), 0) == 0


@pytest.mark.parametrize("dlq_refusals", [0, 3])
@pytest.mark.parametrize("shape", ["tee", "memory"])
def test_b111_a_held_row_found_bad_is_dead_lettered_once_under_its_own_position(
    shape: str, dlq_refusals: int
) -> None:
    """A dead-letter sink full at first holds the tier back; the dead letter is offered
    again, never built (counted) again."""
    report, handle, rows, dlq, meter, _ = _run(
        ErrorPolicy.DEAD_LETTER, shape, dlq_refusals=dlq_refusals
    )
    assert report.exit_code == 0, report.summary()
    assert sorted(rows["tight"]) == GOOD  # type: ignore[type-var]
    assert [
        (r["source_partition"], r["source_offset"], r["payload"], r["error_stage"])
        for r in dlq.rows
    ] == [(0, 1, "bad", "sink")]
    assert "cannot encode b'bad'" in dlq.rows[0]["error_message"]
    labels = {"component": "dead_letter", "component_type": "dead_letter", "pipeline": "held"}
    dead = meter.registry.get_sample_value(
        "spate_dead_letter_records_total", {**labels, "stage": "sink", "reason": "record_error"}
    )
    assert dead == 1
    assert handle.committed == _all_committed(handle)


def test_b111_an_unbound_tee_fails_the_held_rows_own_batch_and_never_raises_into_another() -> None:
    """Offered by hand (no chain policy to apply), a backlogged row found bad fails its
    own source batch; the record offered at the time is taken (B111, B4)."""
    clock = ManualClock()
    meter = Meter("held")
    other, _ = _pool("other", clock, meter, ErrorPolicy.SKIP, tight=False)
    tight, ends = _pool("tight", clock, meter, ErrorPolicy.SKIP, tight=True)
    ends.reject(lambda row: row == BAD)
    tee = TeeSink("both", [other, tight], clock=clock, meter=meter)
    tee.start()
    lane = Lane("t", 0)
    status: dict[int, AckStatus] = {}

    def ack(seq: int) -> AckToken:
        return AckToken(lane, 0, seq, seq, 1, lambda t: status.__setitem__(t.seq, t.status))

    first, bad, good = ack(1), ack(2), ack(3)
    assert tee.offer(b"ok", None, lane, first) is Offer.ACCEPTED
    assert tee.offer(BAD, None, lane, bad) is Offer.ACCEPTED  # backlogged for tight
    tight.tick()  # tight writes its first row: room again
    assert tee.offer(b"good", None, lane, good) is Offer.ACCEPTED
    for token in (first, bad, good):
        token.release()
    assert tee.flush(clock.monotonic() + 60)
    assert status == {1: AckStatus.DELIVERED, 2: AckStatus.FAILED, 3: AckStatus.DELIVERED}
    assert ends.rows() == [b"ok", b"good"]
