"""Frame chains on the shared sink pool (columnar path): B2, B3, B7, B8, B13, B28, B167.

A deserializer that hands out polars frames and a scripted connector that takes Arrow
tables drive the real :class:`~spate.ops._columnar.FrameProcessor` and
:class:`~spate.sink.SinkPool` inline on a manual clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from spate import (
    AckStatus,
    AckToken,
    ErrorClass,
    ErrorPolicy,
    FatalError,
    Lane,
    ManualClock,
    SinkError,
)
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.ops import compile_chain
from spate.records import Headers, PayloadBatch
from spate.sink import BatchConfig, InflightConfig, Offer, PoolConfig, ShardConfig, SinkPool
from spate.testing import IntFrameDeserializer, ScriptedFrameEndpoints

pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")

LANE = Lane("t", 0)


FrameEndpoints = ScriptedFrameEndpoints
FrameDeser = IntFrameDeserializer


def make_pool(
    shards: int = 1,
    *,
    clock: ManualClock | None = None,
    meter: Meter | None = None,
    endpoints: FrameEndpoints | None = None,
    **cfg: Any,
) -> tuple[SinkPool, FrameEndpoints, Meter]:
    clock = clock if clock is not None else ManualClock()
    meter = meter if meter is not None else Meter("p", CollectorRegistry())
    endpoints = endpoints if endpoints is not None else FrameEndpoints(clock)
    pool = SinkPool(
        "sink",
        endpoints,
        shards=[ShardConfig(replicas=(f"s{i}",), weight=i + 1) for i in range(shards)],
        pipeline="p",
        run_nonce="run1",
        meter=meter,
        clock=clock,
        budget=InflightBudget(1 << 30),
        io_threads=0,
        config=PoolConfig(**cfg),
    )
    pool.start()
    return pool, endpoints, meter


def batch(values: list[bytes], keys: list[bytes | None] | None = None) -> PayloadBatch:
    n = len(values)
    return PayloadBatch(
        LANE, list(range(n)), [memoryview(v) for v in values], keys or [None] * n, [0] * n, n
    )


def new_ack(results: dict[str, AckStatus]) -> AckToken:
    return AckToken(LANE, 0, 1, 1, 1, lambda t: results.__setitem__("ack", t.status))


def metric(meter: Meter, name: str, **labels: str) -> float:
    value = meter.registry.get_sample_value(name, {"pipeline": "p", **labels})
    return 0.0 if value is None else value


def test_b3_filtered_and_bad_records_resolve_delivered_and_are_counted() -> None:
    pool, ends, meter = make_pool()
    proc = compile_chain(
        lambda ctx: ctx.frames().filter(pl.col("n") % 2 == 0).sink(),
        deserializer=FrameDeser(),
        sinks={"sink": pool},
        meter=meter,
        pipeline="p",
    )
    results: dict[str, AckStatus] = {}
    ack = new_ack(results)
    assert proc.process(batch([b"1", b"2", b"x", b"4", b"5"]), ack) is None
    ack.release(True)
    pool.tick()
    assert [r for w in ends.written for r in w.rows] == [(2,), (4,)]
    assert results["ack"] is AckStatus.DELIVERED
    assert (
        metric(
            meter,
            "spate_operator_dropped_total",
            component="chain",
            component_type="operators",
            reason="filter",
        )
        == 2
    )
    assert (
        metric(
            meter,
            "spate_deser_records_total",
            component="deserializer",
            component_type="deserializer",
            outcome="skipped",
        )
        == 1
    )


def test_b7_b8_a_full_shard_stalls_the_batch_and_it_resumes_without_rerunning() -> None:
    pool, ends, meter = make_pool(
        batch=BatchConfig(max_rows=2), inflight=InflightConfig(max_per_shard=1)
    )
    calls = []

    def count(df: Any) -> Any:
        calls.append(df.height)
        return df

    proc = compile_chain(
        lambda ctx: ctx.frames().map_batches(count).sink(),
        deserializer=FrameDeser(),
        sinks={"sink": pool},
        meter=meter,
        pipeline="p",
    )
    results: dict[str, AckStatus] = {}
    first, second = new_ack(results), new_ack({})
    assert proc.process(batch([b"1", b"2", b"3"]), first) is None  # sealed, queued
    stalled = proc.process(batch([b"4", b"5"]), second)
    assert stalled is not None and stalled.reason == "sink_full"
    pool.pump()
    assert proc.process(batch([b"4", b"5"]), second, stalled.cursor) is None
    first.release(True)
    second.release(True)
    pool.tick()
    assert sorted(r for w in ends.written for r in w.rows) == [(1,), (2,), (3,), (4,), (5,)]
    assert calls == [3, 2]  # the stalled batch's operators ran once (B8)
    assert results["ack"] is AckStatus.DELIVERED


def test_b13_frames_are_placed_on_the_shards_rows_would_go_to() -> None:
    pool, ends, meter = make_pool(shards=3)
    keys = [f"k{i}".encode() for i in range(60)]
    proc = compile_chain(
        lambda ctx: ctx.frames().sink(),
        deserializer=FrameDeser(),
        sinks={"sink": pool},
        meter=meter,
        pipeline="p",
    )
    ack = new_ack({})
    assert proc.process(batch([str(i).encode() for i in range(60)], keys), ack) is None
    ack.release(True)
    pool.tick()
    placed = {r[0]: w.shard for w in ends.written for r in w.rows}
    assert placed == {i: pool.shard_of(keys[i], LANE) for i in range(60)}
    assert len(set(placed.values())) == 3


def test_b28_record_errors_from_the_sink_follow_its_policy() -> None:
    pool, ends, meter = make_pool()
    chain = lambda ctx: ctx.frames().with_columns((pl.col("n") > 2).alias("bad")).sink()  # noqa: E731
    proc = compile_chain(
        chain,
        deserializer=FrameDeser(),
        sinks={"sink": pool},
        meter=meter,
        pipeline="p",
        record_policy=ErrorPolicy.SKIP,
    )
    ack = new_ack({})
    assert proc.process(batch([b"1", b"2", b"3", b"4"]), ack) is None
    ack.release(True)
    pool.tick()
    assert [r for w in ends.written for r in w.rows] == [(1,), (2,)]
    strict = compile_chain(
        chain,
        deserializer=FrameDeser(),
        sinks={"sink": pool},
        meter=meter,
        pipeline="p",
        record_policy=ErrorPolicy.FAIL,
    )
    with pytest.raises(FatalError, match="offset 2"):
        strict.process(batch([b"1", b"2", b"3"]), new_ack({}))


def test_an_operator_error_fails_naming_the_batch_and_row_operators_are_refused() -> None:
    pool, _ends, meter = make_pool()

    def boom(df: Any) -> Any:
        raise ValueError("boom")

    proc = compile_chain(
        lambda ctx: ctx.frames().map_batches(boom).sink(),
        deserializer=FrameDeser(),
        sinks={"sink": pool},
        meter=meter,
        pipeline="p",
    )
    with pytest.raises(FatalError, match=r"map_batches\(.*boom\).*t\[0\] offsets 0\.\.1"):
        proc.process(batch([b"1", b"2"]), new_ack({}))
    with pytest.raises(TypeError, match="row operator"):
        compile_chain(
            lambda ctx: ctx.frames().map(lambda v: v).sink(),
            deserializer=FrameDeser(),
            sinks={"sink": pool},
            meter=meter,
            pipeline="p",
        )


class BytesFrameDeser(FrameDeser):
    """:class:`FrameDeser` taking whole ``bytes``; keeps the list each batch hands it."""

    takes_bytes = True

    def __init__(self) -> None:
        self.handed: list[list[Any]] = []

    def deserialize_batch(self, payloads: list[memoryview]) -> Any:
        self.handed.append(payloads)
        return super().deserialize_batch(payloads)


def test_b97_b28_a_lazy_kafka_batch_is_decoded_from_its_bytes_without_views() -> None:
    """A batch holding whole ``bytes`` (a Kafka batch) hands a columnar deserializer with
    ``takes_bytes`` those very objects: no view is made per record, and the rows and the
    bad record's batch index are those of a batch of views, which a deserializer without
    ``takes_bytes`` (and any batch without ``values``) still gets."""
    values = [b"1", b"2", b"x", b"4"]
    written: list[list[tuple[Any, ...]]] = []
    for takes_bytes, lazy in ((True, True), (True, False), (False, True)):
        pool, ends, meter = make_pool()
        deser = BytesFrameDeser()
        deser.takes_bytes = takes_bytes
        proc = compile_chain(
            lambda ctx: ctx.frames().sink(),
            deserializer=deser,
            sinks={"sink": pool},
            meter=meter,
            pipeline="p",
        )
        if lazy:
            source_batch = PayloadBatch.lazy(
                LANE,
                list(values),
                first_offset=0,
                next_offset=len(values),
                offsets=list(range(len(values))),
                keys=[None] * len(values),
                timestamps=[0] * len(values),
            )
        else:
            source_batch = batch(values)
        results: dict[str, AckStatus] = {}
        ack = new_ack(results)
        assert proc.process(source_batch, ack) is None
        ack.release(True)
        pool.tick()
        (handed,) = deser.handed
        if takes_bytes and lazy:
            assert handed is source_batch.values
            assert source_batch._payloads is None  # no view was ever made
        else:
            assert all(type(p) is memoryview for p in handed)
        assert results["ack"] is AckStatus.DELIVERED
        written.append([r for w in ends.written for r in w.rows])
        skipped = metric(
            meter,
            "spate_deser_records_total",
            component="deserializer",
            component_type="deserializer",
            outcome="skipped",
        )
        assert skipped == 1
    assert written == [[(1,), (2,), (4,)]] * 3


def test_a_frame_chain_needs_a_columnar_deserializer() -> None:
    pool, _ends, meter = make_pool()

    class RowOnly:
        def deserialize(self, payload: memoryview) -> object:
            return bytes(payload)

    with pytest.raises(ValueError, match="columnar deserializer"):
        compile_chain(
            lambda ctx: ctx.frames().sink(),
            deserializer=RowOnly(),
            sinks={"sink": pool},
            meter=meter,
            pipeline="p",
        )


def routed_pool(
    router: Any, clock: ManualClock, meter: Meter, **cfg: Any
) -> tuple[SinkPool, FrameEndpoints]:
    """A started pool of three shards placing rows with ``router``."""
    ends = FrameEndpoints(clock)
    pool = SinkPool(
        "sink",
        ends,
        shards=[ShardConfig(replicas=(f"s{i}",)) for i in range(3)],
        pipeline="p",
        run_nonce="run1",
        meter=meter,
        clock=clock,
        budget=InflightBudget(1 << 30),
        io_threads=0,
        config=PoolConfig(**cfg),
        router=router,
    )
    pool.start()
    return pool, ends


class ColumnRouter:
    """Places a row by its column ``n`` (``n % 3``), and records how it was asked."""

    placed_by = "n"

    def __init__(self) -> None:
        self.columns: list[list[object]] = []

    def route(self, row: object, key: bytes | None, lane: Lane) -> int:
        return int(row["n"]) % 3  # type: ignore[index]

    def route_column(self, values: Sequence[object], lane: Lane) -> list[int]:
        self.columns.append(list(values))
        return [int(v) % 3 for v in values]  # type: ignore[call-overload]


def test_b13_a_router_placing_by_a_column_gets_the_frames_column_at_once() -> None:
    """B13: a frame goes through the router's ``route_column`` over its ``placed_by``
    column (not the keys), and each row lands where ``route`` puts the row."""
    router = ColumnRouter()
    meter = Meter("p", CollectorRegistry())
    pool, ends = routed_pool(router, ManualClock(), meter)
    assert not pool.frame_needs_keys
    proc = compile_chain(
        lambda ctx: ctx.frames().sink(), deserializer=FrameDeser(), sinks={"sink": pool},
        meter=meter, pipeline="p",
    )  # fmt: skip
    ack = new_ack({})
    assert proc.process(batch([str(i).encode() for i in range(30)]), ack) is None
    ack.release(True)
    pool.tick()
    assert router.columns == [list(range(30))]
    placed = {r[0]: w.shard for w in ends.written for r in w.rows}
    assert placed == {i: router.route({"n": i}, None, LANE) for i in range(30)}


def test_b71_a_frame_chain_and_the_columnar_flagship_take_a_dead_letter_sink() -> None:
    """B71: a frame chain builds with a dead-letter sink, and a pipeline without a chain
    stays on the columnar path when one is set (the dead letters are tested in
    ``test_dead_letter``)."""
    from spate.config import DeadLetterSettings
    from spate.ops._columnar import FrameProcessor
    from spate.ops._deadletter import DeadLetter

    class BothDeser(FrameDeser):
        def deserialize(self, payload: memoryview) -> object:
            return {"n": int(bytes(payload))}

    pool, _ends, meter = make_pool()
    dlq, _dlq_ends, _ = make_pool()
    dead_letter = DeadLetter(
        dlq, DeadLetterSettings(), meter=meter, pipeline="p", kafka_format=False
    )
    chained = compile_chain(
        lambda ctx: ctx.frames().sink(), deserializer=BothDeser(), sinks={"sink": pool},
        meter=meter, pipeline="p", dead_letter=dead_letter,
    )  # fmt: skip
    assert isinstance(chained, FrameProcessor)
    plain = compile_chain(None, deserializer=BothDeser(), sinks={"sink": pool}, meter=meter,
                          pipeline="p", dead_letter=dead_letter)  # fmt: skip
    assert isinstance(plain, FrameProcessor)


def test_b145_a_frame_chain_runs_under_effectively_once_with_the_batch_offsets() -> None:
    """B145: a frame chain compiles under effectively once, and each batch's offsets are
    in the position cell while its frames are offered."""
    from spate.sink import RecordPosition

    pool, _ends, meter = make_pool()
    position = RecordPosition()
    proc = compile_chain(
        lambda ctx: ctx.frames().sink(),
        deserializer=FrameDeser(),
        sinks={"sink": pool},
        meter=meter,
        pipeline="p",
        position=position,
    )
    # The pool is at least once: it takes the frame, and the cell holds the offsets.
    assert proc.process(batch([b"1", b"2"]), new_ack({})) is None
    assert list(position.offsets) == [0, 1]


def test_b144_a_frame_is_admitted_by_the_rows_room_rule_and_cut_at_max_rows() -> None:
    """B144: a frame is admitted as rows and row batches are — by the room its shard's
    open batch and queue have left, a shard with nothing queued always taking it — and
    is cut at ``batch.max_rows`` like them; a refused frame retains nothing and is taken
    whole once the queue has drained."""
    pool, ends, _meter = make_pool(
        batch=BatchConfig(max_rows=4), inflight=InflightConfig(max_per_shard=2)
    )
    values = iter(range(100))

    def prepared(count: int) -> Any:
        df = pl.DataFrame(
            {"n": [next(values) for _ in range(count)], "__spate_row": pl.Series(range(count))}
        )
        frame, bad = pool.prepare_frame(df)
        assert not bad
        return frame

    ack = new_ack({})
    assert pool.offer_frame(prepared(4), None, LANE, ack) is Offer.ACCEPTED  # sealed, queued
    assert pool.offer_frame(prepared(1), None, LANE, ack) is Offer.ACCEPTED  # open: 1 row
    four, nine = prepared(4), prepared(9)
    for frame in (four, nine):
        # One batch waits; the open one has room for 3 rows and the queue for no more.
        held = ack.holders
        assert pool.offer_frame(frame, None, LANE, ack) is Offer.REJECTED
        assert ack.holders == held
        pool.pump()
        assert pool.offer_frame(frame, None, LANE, ack) is Offer.ACCEPTED
    ack.release(True)
    pool.tick()
    assert [len(w.rows) for w in ends.written] == [4, 4, 4, 4, 2]
    assert sorted(r for w in ends.written for r in w.rows) == [(n,) for n in range(18)]


class PickyRouter(ColumnRouter):
    """:class:`ColumnRouter` that cannot place the value 13 (a record error)."""

    def route(self, row: object, key: bytes | None, lane: Lane) -> int:
        if row["n"] == 13:  # type: ignore[index]
            raise SinkError("13 has no shard", ErrorClass.RECORD)
        return super().route(row, key, lane)

    def route_column(self, values: Sequence[object], lane: Lane) -> list[int]:
        if 13 in values:
            raise SinkError("13 has no shard", ErrorClass.RECORD)
        return super().route_column(values, lane)


def picky_pool(
    clock: ManualClock, meter: Meter, policy: ErrorPolicy, **cfg: Any
) -> tuple[SinkPool, FrameEndpoints]:
    return routed_pool(PickyRouter(), clock, meter, on_record_error=policy, **cfg)


ROUTED = [b"1", b"13", b"2", b"13", b"3", b"4"]
"""Records 1 and 3 (offsets 1 and 3) hold a value the router cannot place."""


def test_b167_rows_the_router_cannot_place_are_skipped_alone_and_counted() -> None:
    """B167: under ``skip`` a frame row the sink's router cannot place is that record's
    error alone, counted and logged as on the row path; the other rows are written on
    their shards and the batch resolves delivered."""
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = picky_pool(clock, meter, ErrorPolicy.SKIP)
    proc = compile_chain(
        lambda ctx: ctx.frames().sink(), deserializer=FrameDeser(), sinks={"sink": pool},
        meter=meter, pipeline="p",
    )  # fmt: skip
    results: dict[str, AckStatus] = {}
    ack = new_ack(results)
    assert proc.process(batch(ROUTED), ack) is None
    ack.release(True)
    pool.tick()
    placed = {r[0]: w.shard for w in ends.written for r in w.rows}
    assert placed == {n: n % 3 for n in (1, 2, 3, 4)}
    assert results["ack"] is AckStatus.DELIVERED
    labels = {"component": "chain", "component_type": "operators"}
    assert metric(meter, "spate_operator_dropped_total", **labels, reason="record_error") == 2
    assert metric(meter, "spate_operator_records_out_total", **labels, sink="sink") == 4


def test_b167_a_row_the_router_cannot_place_fails_naming_its_own_record() -> None:
    """B167: under ``fail`` the pipeline fails naming the first such record's offset, as
    the row path does, not the whole batch."""
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, _ends = picky_pool(clock, meter, ErrorPolicy.FAIL)
    proc = compile_chain(
        lambda ctx: ctx.frames().sink(), deserializer=FrameDeser(), sinks={"sink": pool},
        meter=meter, pipeline="p",
    )  # fmt: skip
    with pytest.raises(FatalError, match=r"record at t\[0\] offset 1: sink sink: 13 has no"):
        proc.process(batch(ROUTED), new_ack({}))


def test_b167_rows_the_router_cannot_place_are_dead_lettered_and_hold_the_batch() -> None:
    """B167: under ``dead_letter`` each such row's own record goes to the dead-letter sink
    (stage ``sink``, reason ``record_error``, its own offset) with the batch's ack; a full
    shard meanwhile stalls the batch and the resume goes on where it stopped (B7, B8)."""
    from spate.config import DeadLetterSettings
    from spate.ops._deadletter import DeadLetter
    from spate.testing import scripted_pool

    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = picky_pool(
        clock,
        meter,
        ErrorPolicy.DEAD_LETTER,
        batch=BatchConfig(max_rows=1),
        inflight=InflightConfig(max_per_shard=1),
    )
    dlq_pool, dlq_ends = scripted_pool("dead_letter", clock=clock, meter=meter)
    dlq_pool.start()
    settings = DeadLetterSettings(format="kafka")
    dead_letter = DeadLetter(dlq_pool, settings, meter=meter, pipeline="p", kafka_format=True)
    proc = compile_chain(
        lambda ctx: ctx.frames().sink(), deserializer=FrameDeser(), sinks={"sink": pool},
        meter=meter, pipeline="p", dead_letter=dead_letter,
    )  # fmt: skip
    results: dict[str, AckStatus] = {}
    ack = new_ack(results)
    keys: list[bytes | None] = [b"k%d" % i for i in range(len(ROUTED))]
    work = batch(ROUTED, keys)
    resume: object | None = None
    stalls = 0
    while (stalled := proc.process(work, ack, resume)) is not None:
        assert stalled.reason == "sink_full"
        stalls += 1
        assert stalls < 100
        pool.pump()
        resume = stalled.cursor
    ack.release(True)
    assert pool.flush(clock.monotonic() + 5)
    assert sorted(r[0] for w in ends.written for r in w.rows) == [1, 2, 3, 4]
    assert results == {}  # the dead letters are not written yet (B71)
    assert dlq_pool.flush(clock.monotonic() + 5)
    assert results["ack"] is AckStatus.DELIVERED
    letters = dlq_ends.rows()
    assert [(key, value) for key, value, _ in letters] == [(b"k1", b"13"), (b"k3", b"13")]
    headers = [dict(h) for _, _, h in letters]
    assert [h["spate.error.stage"] for h in headers] == [b"sink", b"sink"]
    assert [h["spate.error.reason"] for h in headers] == [b"record_error", b"record_error"]
    assert [h["spate.error.source.offset"] for h in headers] == [b"1", b"3"]
    assert headers[0]["spate.error.message"].endswith(b"sink sink: 13 has no shard")


def test_b259_frames_get_the_records_metadata_as_columns_on_request() -> None:
    pool, ends, meter = make_pool()
    seen: list[Any] = []

    def look(df: Any) -> Any:
        seen.append(df)
        return df.select("n")

    proc = compile_chain(
        lambda ctx: (
            ctx.frames(
                meta={"off": "$offset", "key": "$key", "tenant": "$header.tenant", "t": "$topic"}
            )
            .filter(pl.col("tenant").is_not_null())
            .map_batches(look)
            .sink()
        ),
        deserializer=FrameDeser(),
        sinks={"sink": pool},
        meter=meter,
        pipeline="p",
    )
    headed = PayloadBatch(
        LANE,
        [7, 8, 9],
        [memoryview(b"1"), memoryview(b"2"), memoryview(b"3")],
        [b"a", None, b"c"],
        [0, 0, 0],
        10,
        headers=[
            Headers([("tenant", b"x"), ("tenant", b"\xff")]),
            Headers([("tenant", b"")]),
            Headers(),
        ],
    )
    results: dict[str, AckStatus] = {}
    assert proc.process(headed, new_ack(results)) is None
    pool.tick()
    (df,) = seen
    assert df.select("n", "off", "key", "tenant", "t").rows() == [
        (1, 7, b"a", b"\xff", "t"),
        (2, 8, None, b"", "t"),
    ]
    assert [r for w in ends.written for r in w.rows] == [(1,), (2,)]
    with pytest.raises(ValueError, match=r"unknown record metadata '\$tenant'"):
        compile_chain(
            lambda ctx: ctx.frames(meta={"x": "$tenant"}).sink(),
            deserializer=FrameDeser(),
            sinks={"sink": pool},
            meter=meter,
            pipeline="p",
        )
