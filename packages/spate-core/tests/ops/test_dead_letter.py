"""The dead-letter policy with the real sink pool (B71, B72), on rows and on columns.

Records the deserializer cannot decode, operator exceptions (``try_map`` and the chain's
``on_error``) and rows a sink refuses go to a dead-letter pool with the batch's ack: the
batch is delivered only once the dead letters are written too, a full dead-letter sink
stalls the chain at the record, and the limits fail the pipeline with one line. The
columnar path (a frame chain, or no chain with a columnar deserializer and a frame-taking
sink) does the same for the deserializer's and the sink's record errors (its frame
operators work on whole batches and have no per-record policy).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from spate import AckStatus, DeserError, ErrorPolicy, FatalError, ManualClock
from spate.config import DeadLetterSettings
from spate.metrics import Meter
from spate.ops import ChainContext, compile_chain
from spate.ops._deadletter import HEADER_NAMES, DeadLetter
from spate.records import MetaColumn, MetaSource
from spate.sink import BatchConfig, InflightConfig, PoolConfig
from spate.testing import scripted_pool

from .test_chain import Acks, JsonDeser, counter, make_batch, ops_metric, run_to_end
from .test_frames import FrameEndpoints, make_pool

PATHS = ["rows", "columns"]
"""The row path and the columnar path (``columns``)."""


def dl_metric(meter: Meter, name: str, **labels: str) -> float:
    return counter(meter, name, component="dead_letter", component_type="dead_letter", **labels)


def _boom(ev: dict[str, Any]) -> dict[str, Any]:
    if ev.get("boom"):
        raise RuntimeError("boom")
    return ev


def _chain(kind: str) -> Any:
    ctx = ChainContext(["sink"])
    if kind == "frames":
        return ctx.frames().sink()
    if kind == "none":
        return None
    if kind == "try_map":
        return ctx.chain().try_map(_boom, "dead_letter").map(lambda ev: ev["n"]).sink()
    return ctx.chain(on_error="dead_letter").map(_boom).map(lambda ev: ev["n"]).sink()


PAYLOADS = [
    b'{"n": 1}',
    b"{not json",
    b'{"n": 2, "boom": true}',
    b'{"n": 3}',
    b'{"n": 99}',
    b'{"n": 4}',
]


class FrameJsonDeser:
    """:class:`JsonDeser`'s columnar twin: a batch of JSON payloads as one frame of ``n``."""

    columnar = True
    takes_bytes = False

    def deserialize_batch(self, payloads: list[memoryview]) -> Any:
        pl = pytest.importorskip("polars")
        values, rows, errors = [], [], []
        for index, payload in enumerate(payloads):
            try:
                event = json.loads(bytes(payload))
            except ValueError as exc:
                errors.append((index, DeserError(f"invalid JSON: {exc}")))
                continue
            values.append(event["n"] if isinstance(event, dict) else event)
            rows.append(index)
        frame = pl.DataFrame(
            {
                "n": pl.Series(values, dtype=pl.Int64),
                "__spate_row": pl.Series(rows, dtype=pl.UInt32),
            }
        )
        return [(None, frame)], errors


class RefusingFrames(FrameEndpoints):
    """Frame endpoints whose ``prepare_frame`` refuses the value 99 (a record error)."""

    def prepare_frame(self, df: Any) -> tuple[Any, list[tuple[int, str]]]:
        pl = pytest.importorskip("polars")
        bad = [(i, "99 does not fit") for i in (df.get_column("n") == 99).arg_true().to_list()]
        return df.filter(pl.col("n") != 99).drop("__spate_row", strict=False).to_arrow(), bad


@dataclasses.dataclass
class Rig:
    """A sink pool (refusing the row 99) and a dead-letter pool on one manual clock."""

    clock: ManualClock
    meter: Meter
    pool: Any
    ends: Any
    dlq_pool: Any
    dlq_ends: Any
    dead_letter: DeadLetter
    columnar: bool = False

    def rows(self) -> list[object]:
        """What the sink wrote: ``n`` of each row."""
        return [r[0] if isinstance(r, tuple) else r for r in self.ends.rows()]

    def dead_letters(self, stage: str, reason: str) -> float:
        """``spate_dead_letter_records_total`` of one stage and reason."""
        return dl_metric(self.meter, "spate_dead_letter_records_total", stage=stage, reason=reason)

    def processor(self, chain: Any, *, interpreted: bool = False) -> Any:
        """``chain`` (None: records straight to the sink) compiled with dead letters."""
        processor = compile_chain(
            chain,
            deserializer=FrameJsonDeser() if self.columnar else JsonDeser(),
            sinks={"sink": self.pool},
            meter=self.meter,
            pipeline="p",
            deser_policy=ErrorPolicy.DEAD_LETTER,
            dead_letter=self.dead_letter,
            interpreted=interpreted,
        )
        from spate.ops._columnar import FrameProcessor

        assert isinstance(processor, FrameProcessor) is self.columnar
        return processor


def _setup(
    *, kafka: bool, dlq_config: PoolConfig | None = None, path: str = "rows", **limits: Any
) -> Rig:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    policy = ErrorPolicy.DEAD_LETTER
    pool: Any
    ends: Any
    if path == "columns":
        pytest.importorskip("polars")
        pool, ends, _ = make_pool(
            clock=clock, meter=meter, endpoints=RefusingFrames(clock), on_record_error=policy
        )
    else:
        config = PoolConfig(on_record_error=policy)
        pool, ends = scripted_pool(clock=clock, meter=meter, config=config)
        ends.reject(lambda row: row == 99)  # a value its column cannot take
    dlq_pool, dlq_ends = scripted_pool("dead_letter", clock=clock, meter=meter, config=dlq_config)
    for p in (pool, dlq_pool):
        p.start()
    settings = DeadLetterSettings(format="kafka" if kafka else "row", **limits)
    dead_letter = DeadLetter(dlq_pool, settings, meter=meter, pipeline="p", kafka_format=kafka)
    return Rig(clock, meter, pool, ends, dlq_pool, dlq_ends, dead_letter, path == "columns")


@pytest.mark.parametrize(
    ("kind", "interpreted"),
    [
        ("try_map", False),
        ("try_map", True),
        ("chain", False),
        ("chain", True),
        ("frames", False),  # the columnar path: a frame chain
        ("none", False),  # the columnar path: no chain
    ],
)
def test_b71_bad_records_go_to_the_dead_letter_sink_and_hold_the_batch(
    kind: str, interpreted: bool
) -> None:
    """On the columnar path (B148) the record the deserializer cannot decode and the value
    the sink's ``prepare_frame`` refuses are dead-lettered with the row path's headers and
    counts; it has no per-record operator, so the boom record is a good one there."""
    rig = _setup(kafka=True, path="columns" if kind in ("frames", "none") else "rows")
    processor = rig.processor(_chain(kind), interpreted=interpreted)
    acks = Acks()
    ack = acks.new(len(PAYLOADS))
    batch = make_batch(PAYLOADS)
    assert processor.process(batch, ack) is None
    ack.release()
    assert rig.pool.flush(rig.clock.monotonic() + 5)
    assert rig.rows() == ([1, 2, 3, 4] if rig.columnar else [1, 3, 4])
    # The good rows are written, but the batch waits for its dead letters (B71).
    assert acks.resolved == []
    assert ack.holders == 1
    assert rig.dlq_pool.flush(rig.clock.monotonic() + 5)
    assert acks.resolved == [AckStatus.DELIVERED]

    expected = [
        (b"k1", b"{not json", b"deserializer", b"malformed", b"101"),
        (b"k2", b'{"n": 2, "boom": true}', b"operator", b"RuntimeError", b"102"),
        (b"k4", b'{"n": 99}', b"sink", b"record_error", b"104"),
    ]
    if rig.columnar:
        del expected[1]
    letters = rig.dlq_ends.rows()
    assert [(key, value) for key, value, _ in letters] == [e[:2] for e in expected]
    headers = [dict(h) for _, _, h in letters]
    assert all(list(h) == list(HEADER_NAMES) for h in headers)
    assert [h["spate.error.stage"] for h in headers] == [e[2] for e in expected]
    assert [h["spate.error.reason"] for h in headers] == [e[3] for e in expected]
    assert [h["spate.error.source.offset"] for h in headers] == [e[4] for e in expected]
    assert headers[0]["spate.error.source.topic"] == b"orders"
    assert headers[0]["spate.error.source.partition"] == b"3"
    assert headers[0]["spate.error.pipeline"] == b"p"
    assert b"invalid JSON" in headers[0]["spate.error.message"]
    if rig.columnar:
        assert headers[-1]["spate.error.message"] == b"sink sink: 99 does not fit"
    for _, _, stage, reason, _ in expected:
        assert rig.dead_letters(stage.decode(), reason.decode()) == 1
    outs = ops_metric(rig.meter, "spate_operator_records_out_total", sink="sink")
    assert outs == len(rig.rows())


def test_b71_a_frame_row_of_no_known_record_is_not_dead_lettered_as_another() -> None:
    """A frame operator that aggregates drops the records' row column: a row the sink then
    refuses cannot be charged to a record, so it fails naming why instead of sending
    some other record's payload to the dead-letter sink (B148)."""
    pl = pytest.importorskip("polars")
    rig = _setup(kafka=True, path="columns")

    def total(df: Any) -> Any:
        return df.select(pl.col("n").sum())

    processor = rig.processor(ChainContext(["sink"]).frames().map_batches(total).sink())
    with pytest.raises(FatalError, match=r"offsets 100\.\.101: 99 does not fit.*cannot be dead"):
        processor.process(make_batch([b"90", b"9"]), Acks().new(2))
    assert rig.dead_letters("sink", "record_error") == 0


@pytest.mark.parametrize("path", PATHS)
def test_b72_a_run_of_dead_letters_counts_in_record_order_across_stages(path: str) -> None:
    """Records 1 (cannot decode), 2 (the sink refuses it) and 3 (cannot decode) are three
    dead letters in a row whatever stage found each: the columnar path, which finds the
    sink's record errors after the whole batch is decoded, counts them in record order
    like the row path (B72, B148)."""
    rig = _setup(kafka=True, max_consecutive=2, path=path)
    processor = rig.processor(None)
    batch = make_batch([b"1", b"{x", b"99", b"{y", b"2"])
    with pytest.raises(FatalError, match=r"3 records in a row of orders\[3\].*max_consecutive"):
        processor.process(batch, Acks().new(5))
    assert rig.dead_letters("deserializer", "malformed") == 1
    assert rig.dead_letters("sink", "record_error") == 1


@pytest.mark.parametrize("path", PATHS)
def test_b71_row_format_carries_payload_and_error_columns(path: str) -> None:
    rig = _setup(kafka=False, path=path)
    processor = rig.processor(_chain("frames" if rig.columnar else "chain"))
    ack = Acks().new(len(PAYLOADS))
    assert processor.process(make_batch(PAYLOADS), ack) is None
    assert rig.dlq_pool.flush(rig.clock.monotonic() + 5)
    rows = rig.dlq_ends.rows()
    if rig.columnar:  # no per-record operator: the boom record is a good one
        rows.insert(1, None)
    else:
        assert rows[1]["error_stage"] == "operator"
        assert rows[1]["source_offset"] == 102
        assert rows[1]["key"] == "k2"
    assert [r["payload"] for r in rows if r] == [
        "{not json",
        *([] if rig.columnar else ['{"n": 2, "boom": true}']),
        '{"n": 99}',
    ]
    assert rows[0]["error_stage"] == "deserializer"
    assert rows[2]["error_stage"] == "sink"
    assert rows[2]["source_offset"] == 104
    assert rows[2]["key"] == "k4"
    assert json.loads(rows[2]["payload"]) == {"n": 99}


@pytest.mark.parametrize(
    ("path", "interpreted"), [("rows", False), ("rows", True), ("columns", False)]
)
def test_b71_a_full_dead_letter_sink_stalls_the_chain_at_the_record(
    path: str, interpreted: bool
) -> None:
    cfg = PoolConfig(batch=BatchConfig(max_rows=1), inflight=InflightConfig(max_per_shard=1))
    rig = _setup(kafka=True, dlq_config=cfg, path=path)
    rig.dlq_ends.script("s0", "retryable", "retryable")
    processor = rig.processor(
        _chain("frames" if rig.columnar else "chain"), interpreted=interpreted
    )
    acks = Acks()
    ack = acks.new(len(PAYLOADS))

    def pump() -> None:
        rig.clock.advance(60)
        rig.dlq_pool.pump()

    stalls = run_to_end(processor, make_batch(PAYLOADS), ack, pump)
    ack.release()
    assert stalls and all(s.sink == "dead_letter" for s in stalls)
    assert rig.pool.flush(rig.clock.monotonic() + 5)
    assert rig.dlq_pool.flush(rig.clock.monotonic() + 60)
    if rig.columnar:  # no per-record operator: the boom record is a good one
        assert rig.rows() == [1, 2, 3, 4]
        assert [k for k, _, _ in rig.dlq_ends.rows()] == [b"k1", b"k4"]
    else:
        assert rig.rows() == [1, 3, 4]
        assert [k for k, _, _ in rig.dlq_ends.rows()] == [b"k1", b"k2", b"k4"]
        assert rig.dead_letters("operator", "RuntimeError") == 1
    assert acks.resolved == [AckStatus.DELIVERED]
    assert rig.dead_letters("sink", "record_error") == 1


@pytest.mark.parametrize("path", PATHS)
def test_b72_max_consecutive_fails_the_pipeline_with_one_line(path: str) -> None:
    rig = _setup(kafka=True, max_consecutive=2, path=path)
    meter, processor = rig.meter, rig.processor(None)
    batch = make_batch([b"1", b"{x", b"{y", b"2", b"{a", b"{b", b"{c"])
    with pytest.raises(
        FatalError, match=r"3 records in a row of orders\[3\].*max_consecutive"
    ) as info:
        processor.process(batch, Acks().new(7))
    assert "\n" not in str(info.value)
    assert dl_metric(meter, "spate_dead_letter_limit_breaches_total", limit="max_consecutive") == 1
    assert rig.dead_letters("deserializer", "malformed") == 4


@pytest.mark.parametrize("path", PATHS)
def test_b72_max_ratio_over_the_window_fails_the_pipeline(path: str) -> None:
    rig = _setup(kafka=True, max_ratio=0.25, window=8, max_consecutive=0, path=path)
    meter, processor = rig.meter, rig.processor(None)
    ok_batch = make_batch([b"1", b"{x", b"2", b"3", b"4", b"5", b"6", b"7"])  # 1 of 8
    assert processor.process(ok_batch, Acks().new(8)) is None
    bad = make_batch([b"{1", b"{x", b"2", b"{y", b"3", b"{z", b"4", b"{w"])
    # The 4th dead letter of the second batch makes 5 of the last 16 records (> 25%).
    with pytest.raises(FatalError, match=r"5 of the last 16 records.*max_ratio is 0.25"):
        processor.process(bad, Acks().new(8))
    assert dl_metric(meter, "spate_dead_letter_limit_breaches_total", limit="max_ratio") == 1


def test_b71_dead_letter_policy_without_a_dead_letter_sink_is_refused() -> None:
    pool, _ = scripted_pool()
    with pytest.raises(ValueError, match="no dead_letter section"):
        compile_chain(
            _chain("try_map"),
            deserializer=JsonDeser(),
            sinks={"sink": pool},
            meter=Meter("p"),
            pipeline="p",
        )


def test_b71_an_error_asking_for_dead_letter_without_a_sink_fails_naming_the_record() -> None:
    """A deserializer setting of its own (Avro's ``on_unknown_schema``) may ask for it."""

    class Unknown:
        many = False

        def deserialize(self, payload: memoryview) -> object:
            raise DeserError("schema id 7 unknown", policy=ErrorPolicy.DEAD_LETTER)

    pool, _ = scripted_pool()
    processor = compile_chain(
        None, deserializer=Unknown(), sinks={"sink": pool}, meter=Meter("p"), pipeline="p"
    )
    with pytest.raises(
        FatalError, match=r"orders\[3\] offset 100 is to be dead-lettered.*no dead_letter"
    ):
        processor.process(make_batch([b"1"]), Acks().new(1))


@pytest.mark.parametrize("path", PATHS)
def test_b257_a_dead_letter_sink_gets_its_metadata_columns_from_the_records_own(
    path: str,
) -> None:
    rig = _setup(kafka=False, path=path)
    rig.dlq_pool.meta_columns = (
        MetaColumn("kafka_offset", MetaSource("offset"), 0),
        MetaColumn("kafka_key", MetaSource("key"), 1),
        MetaColumn("raw", MetaSource("value"), 2),
    )
    processor = rig.processor(_chain("frames" if rig.columnar else "chain"))
    ack = Acks().new(len(PAYLOADS))
    assert processor.process(make_batch(PAYLOADS), ack) is None
    assert rig.dlq_pool.flush(rig.clock.monotonic() + 5)
    rows = rig.dlq_ends.rows()
    bad = [1, 4] if rig.columnar else [1, 2, 4]
    assert [(r["kafka_offset"], r["kafka_key"], r["raw"]) for r in rows] == [
        (100 + i, b"k%d" % i, PAYLOADS[i]) for i in bad
    ]
    assert [r["source_offset"] for r in rows] == [100 + i for i in bad]
