"""Operator chains end to end with the real sink pool (B3, B8, B21, B28).

The chain is compiled with :func:`spate.ops.compile_chain` (the generated loop) and
writes into a :class:`~spate.sink.SinkPool` over scripted endpoints, so acks, drops and
stalls are the real ones.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from spate import (
    AckStatus,
    AckToken,
    DeserError,
    DeserErrorKind,
    ErrorPolicy,
    FatalError,
    Lane,
    ManualClock,
)
from spate.metrics import Meter
from spate.ops import NO_RECORD, ChainContext, Stalled, build_chain, compile_chain
from spate.records import PayloadBatch
from spate.sink import BatchConfig, InflightConfig, PoolConfig
from spate.testing import AckRecorder, scripted_pool

LANE = Lane("orders", 3)


class JsonDeser:
    """Whole-object payloads decoded from ``view.obj`` (no copy), as a Kafka one would."""

    many = False

    def __init__(self) -> None:
        self.seen_objects: list[object] = []
        self.not_ready: dict[bytes, int] = {}

    def deserialize(self, payload: memoryview) -> object:
        self.seen_objects.append(payload.obj)
        raw = payload.obj if isinstance(payload.obj, bytes) else bytes(payload)
        if raw == b"":
            return NO_RECORD
        if raw.startswith(b"?"):
            left = self.not_ready.get(raw, 1)
            self.not_ready[raw] = left - 1
            if left > 0:
                raise DeserError("registry unreachable", DeserErrorKind.NOT_READY)
            raw = raw[1:]
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise DeserError(f"invalid JSON: {exc}") from exc


def make_batch(payloads: list[bytes]) -> PayloadBatch:
    views = [memoryview(p) for p in payloads]
    return PayloadBatch(
        LANE,
        list(range(100, 100 + len(views))),
        views,
        [f"k{i}".encode() for i in range(len(views))],
        [0] * len(views),
        100 + len(views),
    )


def Acks() -> AckRecorder:
    return AckRecorder(LANE, first_offset=100)


def counter(meter: Meter, name: str, **labels: str) -> float:
    value = meter.registry.get_sample_value(name, {"pipeline": meter.pipeline, **labels})
    return 0.0 if value is None else value


def ops_metric(meter: Meter, name: str, **labels: str) -> float:
    return counter(meter, name, component="chain", component_type="operators", **labels)


def run_to_end(processor: Any, batch: PayloadBatch, ack: AckToken, pump: Any) -> list[Stalled]:
    stalls: list[Stalled] = []
    resume = None
    for _ in range(1000):
        result = processor.process(batch, ack, resume)
        if result is None:
            return stalls
        stalls.append(result)
        pump()
        resume = result.cursor
    raise AssertionError("the batch never finished")


def test_b3_dropped_records_resolve_delivered_and_are_counted_by_reason() -> None:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    paid, _ = scripted_pool("paid", clock=clock, meter=meter)
    refunded, _ = scripted_pool("refunded", clock=clock, meter=meter)
    for pool in (paid, refunded):
        pool.start()

    def chains(ctx: ChainContext) -> Any:
        paid_h, refunded_h = ctx.sink("paid"), ctx.sink("refunded")

        def route(ev: dict[str, Any], out: Any) -> None:
            if ev["kind"] == "paid":
                out.emit(paid_h, (ev["id"],))
            elif ev["kind"] == "refund":
                out.emit(refunded_h, (ev["id"],))

        return (
            ctx.chain()
            .try_map(lambda ev: ev if ev["id"] != 3 else 1 / 0, "skip")
            .filter(lambda ev: ev["kind"] != "placed")
            .split(unrouted="skip")
            .route(route)
        )

    processor = compile_chain(
        build_chain(chains, ["paid", "refunded"]),
        deserializer=JsonDeser(),
        sinks={"paid": paid, "refunded": refunded},
        meter=meter,
        pipeline="p",
    )
    events = [
        {"id": 1, "kind": "paid"},
        {"id": 2, "kind": "placed"},
        {"id": 3, "kind": "paid"},
        {"id": 4, "kind": "refund"},
        {"id": 5, "kind": "other"},
    ]
    payloads = [json.dumps(e).encode() for e in events] + [b"{not json", b""]
    acks = Acks()
    ack = acks.new(len(payloads))
    assert processor.process(make_batch(payloads), ack) is None
    ack.release()
    for pool in (paid, refunded):
        assert pool.flush(clock.monotonic() + 5)
    assert acks.resolved == [AckStatus.DELIVERED]
    assert ops_metric(meter, "spate_operator_dropped_total", reason="filter") == 1
    assert ops_metric(meter, "spate_operator_dropped_total", reason="error") == 1
    assert ops_metric(meter, "spate_operator_dropped_total", reason="unrouted") == 1
    assert ops_metric(meter, "spate_operator_errors_total", policy="skip") == 1
    assert ops_metric(meter, "spate_operator_records_in_total") == 5
    assert ops_metric(meter, "spate_operator_records_out_total", sink="paid") == 1
    assert ops_metric(meter, "spate_operator_records_out_total", sink="refunded") == 1
    deser = {"component": "deserializer", "component_type": "deserializer"}
    assert counter(meter, "spate_deser_dropped_total", reason="malformed", **deser) == 1
    assert counter(meter, "spate_deser_dropped_total", reason="empty", **deser) == 1
    assert counter(meter, "spate_deser_records_total", outcome="ok", **deser) == 5


def test_b3_batch_of_only_dropped_records_resolves_when_the_chain_lets_go() -> None:
    clock = ManualClock()
    pool, ends = scripted_pool(clock=clock)
    pool.start()
    processor = compile_chain(
        ChainContext(["sink"]).chain().filter(lambda v: False).sink(),
        deserializer=JsonDeser(),
        sinks={"sink": pool},
        meter=Meter("p", CollectorRegistry()),
        pipeline="p",
    )
    acks = Acks()
    ack = acks.new(3)
    assert processor.process(make_batch([b"1", b"2", b"3"]), ack) is None
    assert ack.holders == 1  # nothing was retained by the sink
    ack.release()
    assert acks.resolved == [AckStatus.DELIVERED]
    assert ends.attempts == []


def test_b8_stalled_batch_resumes_at_the_exact_child_and_runs_no_operator_twice() -> None:
    clock = ManualClock()
    cfg = PoolConfig(batch=BatchConfig(max_rows=2), inflight=InflightConfig(max_per_shard=1))
    pool, ends = scripted_pool(clock=clock, config=cfg)
    pool.start()
    calls: list[tuple[str, object]] = []

    def explode(n: int) -> list[int]:
        calls.append(("flat_map", n))
        return [n * 10 + c for c in range(3)]

    def seen(v: int) -> None:
        calls.append(("inspect", v))

    spec = ChainContext(["sink"]).chain().flat_map(explode).inspect(seen).map(lambda v: (v,)).sink()
    processor = compile_chain(
        spec, deserializer=JsonDeser(), sinks={"sink": pool}, meter=Meter("p"), pipeline="p"
    )
    acks = Acks()
    ack = acks.new(4)
    stalls = run_to_end(processor, make_batch([b"1", b"2", b"3", b"4"]), ack, pool.pump)
    ack.release()
    assert pool.flush(clock.monotonic() + 5)
    assert stalls and all(s.reason == "sink_full" and s.sink == "sink" for s in stalls)
    expected_rows = [(n * 10 + c,) for n in (1, 2, 3, 4) for c in range(3)]
    assert ends.rows() == expected_rows  # each row once, in order
    assert [c for c in calls if c[0] == "flat_map"] == [("flat_map", n) for n in (1, 2, 3, 4)]
    assert [c[1] for c in calls if c[0] == "inspect"] == [r[0] for r in expected_rows]
    assert acks.resolved == [AckStatus.DELIVERED]


def test_b21_not_ready_record_stalls_and_is_decoded_again_never_dropped() -> None:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = scripted_pool(clock=clock)
    pool.start()
    processor = compile_chain(
        None, deserializer=JsonDeser(), sinks={"sink": pool}, meter=meter, pipeline="p"
    )
    ack = Acks().new(3)
    batch = make_batch([b"1", b"?2", b"3"])
    stalled = processor.process(batch, ack)
    assert isinstance(stalled, Stalled)
    assert stalled.reason == "not_ready"
    assert processor.process(batch, ack, stalled.cursor) is None
    ack.release()
    assert pool.flush(clock.monotonic() + 5)
    assert ends.rows() == [1, 2, 3]
    deser = {"component": "deserializer", "component_type": "deserializer"}
    assert counter(meter, "spate_deser_records_total", outcome="not_ready", **deser) == 1


def test_b28_malformed_payload_fails_under_the_fail_policy_naming_where() -> None:
    pool, _ = scripted_pool()
    processor = compile_chain(
        None,
        deserializer=JsonDeser(),
        sinks={"sink": pool},
        meter=Meter("p"),
        pipeline="p",
        deser_policy=ErrorPolicy.FAIL,
    )
    with pytest.raises(FatalError, match=r"orders\[3\] offset 101.*invalid JSON"):
        processor.process(make_batch([b"1", b"{oops"]), Acks().new(2))


@pytest.mark.parametrize("policy", [ErrorPolicy.SKIP, ErrorPolicy.FAIL])
def test_b28_row_the_sink_cannot_encode_follows_the_record_policy(policy: ErrorPolicy) -> None:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = scripted_pool(clock=clock, config=PoolConfig(on_record_error=policy))
    ends.reject(lambda row: row == 2)
    pool.start()
    processor = compile_chain(
        None, deserializer=JsonDeser(), sinks={"sink": pool}, meter=meter, pipeline="p"
    )
    acks = Acks()
    ack = acks.new(3)
    if policy is ErrorPolicy.FAIL:
        with pytest.raises(FatalError, match="cannot encode 2"):
            processor.process(make_batch([b"1", b"2", b"3"]), ack)
        return
    assert processor.process(make_batch([b"1", b"2", b"3"]), ack) is None
    ack.release()
    assert pool.flush(clock.monotonic() + 5)
    assert ends.rows() == [1, 3]
    assert acks.resolved == [AckStatus.DELIVERED]
    assert ops_metric(meter, "spate_operator_dropped_total", reason="record_error") == 1


def test_operator_exception_fails_the_pipeline_by_default() -> None:
    pool, _ = scripted_pool()

    def parse(v: int) -> int:
        raise KeyError("amount")

    processor = compile_chain(
        ChainContext(["sink"]).chain().map(parse).sink(),
        deserializer=JsonDeser(),
        sinks={"sink": pool},
        meter=Meter("p"),
        pipeline="p",
    )
    with pytest.raises(FatalError, match=r"map\(.*parse\) raised .* offset 100: KeyError"):
        processor.process(make_batch([b"1"]), Acks().new(1))


def test_unrouted_record_fails_by_default_and_bad_handles_are_refused() -> None:
    pool_a, _ = scripted_pool("a")
    pool_b, _ = scripted_pool("b")
    sinks = {"a": pool_a, "b": pool_b}
    ctx = ChainContext(sinks)
    processor = compile_chain(
        ctx.chain().split().route(lambda v, out: None),
        deserializer=JsonDeser(),
        sinks=sinks,
        meter=Meter("p"),
        pipeline="p",
    )
    with pytest.raises(FatalError, match="routed to no sink"):
        processor.process(make_batch([b"1"]), Acks().new(1))
    with pytest.raises(ValueError, match="no sink named 'c'"):
        ctx.sink("c")
    stranger = ChainContext(["z"]).sink("z")
    processor = compile_chain(
        ctx.chain().split().route(lambda v, out: out.emit(stranger, v)),
        deserializer=JsonDeser(),
        sinks=sinks,
        meter=Meter("p"),
        pipeline="p",
    )
    with pytest.raises(FatalError, match="needs a sink handle"):
        processor.process(make_batch([b"1"]), Acks().new(1))


def test_chain_shape_errors_are_clear() -> None:
    pool_a, _ = scripted_pool("a")
    pool_b, _ = scripted_pool("b")
    sinks = {"a": pool_a, "b": pool_b}
    with pytest.raises(ValueError, match="a chain is required when there are several sinks"):
        compile_chain(None, deserializer=None, sinks=sinks, meter=Meter("p"), pipeline="p")
    with pytest.raises(ValueError, match=r"sink\('nope'\): no such sink"):
        compile_chain(
            ChainContext(sinks).chain().sink("nope"),
            deserializer=None,
            sinks=sinks,
            meter=Meter("p"),
            pipeline="p",
        )
    with pytest.raises(TypeError, match="split\\(\\) without route"):
        build_chain(lambda ctx: ctx.chain().split(), sinks)
    with pytest.raises(TypeError, match="map\\(\\) needs a callable"):
        ChainContext(sinks).chain().map(42)  # type: ignore[arg-type]


def test_payload_views_are_borrowed_and_obj_gives_the_whole_object() -> None:
    """The deserializer sees a memoryview whose ``obj`` is the source's own bytes."""
    clock = ManualClock()
    pool, ends = scripted_pool(clock=clock)
    pool.start()
    deser = JsonDeser()
    processor = compile_chain(
        None, deserializer=deser, sinks={"sink": pool}, meter=Meter("p"), pipeline="p"
    )
    payloads = [b"[1]", b"[2]"]
    ack = Acks().new(2)
    processor.process(make_batch(payloads), ack)
    assert all(a is b for a, b in zip(deser.seen_objects, payloads, strict=True))
    ack.release()
    assert pool.flush(clock.monotonic() + 5)
    assert ends.rows() == [[1], [2]]


def test_without_a_deserializer_operators_get_bytes_copies() -> None:
    clock = ManualClock()
    pool, ends = scripted_pool(clock=clock)
    pool.start()
    processor = compile_chain(
        lambda ctx: ctx.chain().map(lambda b: b.upper()),
        deserializer=None,
        sinks={"sink": pool},
        meter=Meter("p"),
        pipeline="p",
    )
    ack = Acks().new(1)
    processor.process(make_batch([b"abc"]), ack)
    ack.release()
    assert pool.flush(clock.monotonic() + 5)
    assert ends.rows() == [b"ABC"]


class NdjsonDeser:
    many = True

    def deserialize_many(self, payload: memoryview) -> list[object]:
        out: list[object] = []
        for line in bytes(payload).splitlines():
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                out.append(DeserError(f"bad line: {exc}"))
        return out


def test_b28_many_record_payload_isolates_a_bad_line() -> None:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = scripted_pool(clock=clock)
    pool.start()
    processor = compile_chain(
        None, deserializer=NdjsonDeser(), sinks={"sink": pool}, meter=meter, pipeline="p"
    )
    ack = Acks().new(2)
    assert processor.process(make_batch([b"1\n2\n{x\n3", b"4"]), ack) is None
    ack.release()
    assert pool.flush(clock.monotonic() + 5)
    assert ends.rows() == [1, 2, 3, 4]
    deser = {"component": "deserializer", "component_type": "deserializer"}
    assert counter(meter, "spate_deser_dropped_total", reason="malformed", **deser) == 1


class UpperDeser:
    """A deserializer declaring only ``deserialize`` (no ``many`` attribute)."""

    def deserialize(self, payload: memoryview) -> object:
        return bytes(payload).upper()


class ManyFalseDeser(NdjsonDeser):
    """Both methods, ``many = False``: the chain calls ``deserialize``."""

    many = False

    def deserialize(self, payload: memoryview) -> object:
        return [bytes(payload)]


@pytest.mark.parametrize(
    ("deserializer", "rows"),
    [(UpperDeser(), [b"AB", b"C"]), (ManyFalseDeser(), [[b"ab"], [b"c"]])],
    ids=["deserialize-only", "many-false"],
)
def test_b232_the_chain_calls_the_method_a_deserializer_declares(
    deserializer: object, rows: list[object]
) -> None:
    """B232: ``deserialize_many`` for a ManyDeserializer with ``many = True`` (above),
    else ``deserialize`` of a Deserializer, with or without a ``many`` attribute."""
    clock = ManualClock()
    pool, ends = scripted_pool(clock=clock)
    pool.start()
    processor = compile_chain(
        None,
        deserializer=deserializer,
        sinks={"sink": pool},
        meter=Meter("p", CollectorRegistry()),
        pipeline="p",
    )
    ack = Acks().new(2)
    assert processor.process(make_batch([b"ab", b"c"]), ack) is None
    ack.release()
    assert pool.flush(clock.monotonic() + 5)
    assert ends.rows() == rows


def test_b232_an_object_declaring_no_deserializer_method_is_refused_at_build() -> None:
    """B232: neither ``deserialize`` nor ``many = True`` with ``deserialize_many``: the
    chain refuses it when it is compiled, naming its type, before any batch."""

    class NoMethod:
        many = True  # but no deserialize_many

    pool, _ends = scripted_pool(clock=ManualClock())
    with pytest.raises(TypeError, match="NoMethod is not a deserializer"):
        compile_chain(
            None,
            deserializer=NoMethod(),
            sinks={"sink": pool},
            meter=Meter("p", CollectorRegistry()),
            pipeline="p",
        )


def test_generated_loop_calls_user_functions_directly() -> None:
    """The fused loop is one function with the user's calls inlined, no generators."""
    from spate.ops._codegen import FusedChain

    pool, _ = scripted_pool()
    processor = compile_chain(
        ChainContext(["sink"]).chain().map(str).filter(bool).flat_map(list).sink(),
        deserializer=JsonDeser(),
        sinks={"sink": pool},
        meter=Meter("p"),
        pipeline="p",
    )
    assert isinstance(processor, FusedChain)
    source = processor.source
    assert "yield" not in source
    assert "v = f0(v)" in source and "if not f1(v):" in source and "c2 = f2(v)" in source
    assert "r = o0(v, key, lane, ack)" in source
