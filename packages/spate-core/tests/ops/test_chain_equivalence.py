"""The generated loop behaves exactly like the reference interpreter (B3, B8, B28).

Hypothesis builds random chains (map, try_map, filter, flat_map, inspect, sink or
split) and random batches (good, malformed, empty and not-yet-ready payloads, single or
many records per payload) and sinks that sometimes refuse a row or cannot encode it.
Both executors run the same scenario, resuming every stall with its cursor; the rows
each sink accepted, the operator calls, the stalls, the errors, every metric and the
ack's resolution must be identical.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from spate import AckStatus, AckToken, DeserError, DeserErrorKind, ErrorPolicy, FatalError
from spate.config import DeadLetterSettings
from spate.errors import ErrorClass, SinkError
from spate.metrics import Meter
from spate.ops import NO_RECORD, ChainContext, Stalled, compile_chain
from spate.ops._deadletter import DeadLetter
from spate.records import Lane, PayloadBatch
from spate.sink import Offer

from tests.support.scale import scaled

LANE = Lane("t", 0)


@dataclass
class RecordingSink:
    """A Sink double: records accepted rows, refuses offers by attempt number."""

    name: str
    reject_attempts: frozenset[int]
    bad_mod: int
    on_record_error: ErrorPolicy
    rows: list[tuple[object, bytes | None]] = field(default_factory=list)
    attempts: int = 0
    held: list[AckToken] = field(default_factory=list)

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        self.attempts += 1
        if self.attempts in self.reject_attempts:
            return Offer.REJECTED
        if isinstance(row, int) and self.bad_mod and row % self.bad_mod == 3:
            raise SinkError(f"cannot encode {row}", ErrorClass.RECORD)
        if not self.held or self.held[-1] is not ack:
            ack.retain(self.name)
            self.held.append(ack)
        self.rows.append((row, key))
        return Offer.ACCEPTED

    def release_all(self) -> None:
        for ack in self.held:
            ack.release(True, holder=self.name)
        self.held.clear()

    # Unused parts of the Sink protocol.
    def start(self) -> None: ...
    def tick(self) -> None: ...
    def flush(self, deadline: float) -> bool:
        return True

    def abandon(self) -> int:
        return 0

    def ready(self) -> bool:
        return True

    def close(self) -> None: ...


class IntDeser:
    """b'12' -> 12; b'x..' malformed; b'' NO_RECORD; b'r..' not ready on first tries."""

    many = False

    def __init__(self, not_ready_tries: int, takes_bytes: bool = False) -> None:
        self.tries: dict[bytes, int] = {}
        self.not_ready_tries = not_ready_tries
        self.takes_bytes = takes_bytes
        self.inputs: set[type] = set()

    def decode(self, raw: bytes) -> object:
        if raw == b"":
            return NO_RECORD
        if raw.startswith(b"x"):
            raise DeserError("bad digits")
        if raw.startswith(b"r"):
            n = self.tries.get(raw, 0)
            self.tries[raw] = n + 1
            if n < self.not_ready_tries:
                raise DeserError("schema not reachable", DeserErrorKind.NOT_READY)
            return int(raw[1:])
        return int(raw)

    def deserialize(self, payload: memoryview | bytes) -> object:
        self.inputs.add(type(payload))
        return self.decode(bytes(payload))


class ManyIntDeser(IntDeser):
    """b'1,2,x' -> [1, 2, DeserError]; a payload starting with '!' is wholly bad."""

    many = True

    def deserialize_many(self, payload: memoryview | bytes) -> list[object]:
        self.inputs.add(type(payload))
        raw = bytes(payload)
        if raw.startswith(b"!"):
            raise DeserError("whole payload bad")
        out: list[object] = []
        for part in raw.split(b",") if raw else []:
            try:
                out.append(self.decode(part))
            except DeserError as exc:
                out.append(exc)
        return out


# -- chains as data, so each executor gets fresh closures --

op_strategy = st.one_of(
    st.tuples(st.just("map"), st.integers(0, 5)),
    st.tuples(st.just("map_raise"), st.integers(5, 9)),
    st.tuples(
        st.just("try_map"), st.integers(3, 7), st.sampled_from(["skip", "fail", "dead_letter"])
    ),
    st.tuples(st.just("filter"), st.integers(2, 5)),
    st.tuples(st.just("flat_map"), st.integers(0, 3)),
    st.tuples(st.just("flat_gen"), st.integers(1, 3)),
    st.tuples(
        st.just("inspect"),
    ),
)


def build(
    ops: list[tuple[Any, ...]],
    log: list[tuple[str, object]],
    meta: bool = False,
    on_error: Any = "fail",
) -> Callable[[Any], Any]:
    def chains(ctx: ChainContext) -> Any:
        chain = ctx.chain(meta=meta, on_error=on_error)
        if meta:
            # (value, RecordMeta): fold the record's offset and key into the value, so a
            # wrong meta on either executor changes the rows.
            chain = chain.map(
                lambda pair: pair[0] + pair[1].offset % 3 + len(pair[1].key or b"") % 2
            )
        for n, op in enumerate(ops):
            kind = op[0]
            if kind == "map":
                c = op[1]
                chain = chain.map(lambda v, c=c, n=n: (log.append((f"m{n}", v)), v + c)[1])
            elif kind == "map_raise":
                m = op[1]
                chain = chain.map(lambda v, m=m: v if v % m else 1 // 0)
            elif kind == "try_map":
                m, policy = op[1], op[2]
                chain = chain.try_map(
                    lambda v, m=m, n=n: (log.append((f"t{n}", v)), v if v % m else 1 // 0)[1],
                    policy,
                )
            elif kind == "filter":
                m = op[1]
                chain = chain.filter(lambda v, m=m: v % m != 1)
            elif kind == "flat_map":
                w = op[1]
                chain = chain.flat_map(lambda v, w=w: [v + d for d in range(v % (w + 1))])
            elif kind == "flat_gen":
                w = op[1]
                chain = chain.flat_map(lambda v, w=w: (v * 2 + d for d in range(w)))
            else:
                chain = chain.inspect(lambda v, n=n: log.append((f"i{n}", v)))
        return chain

    return chains


@dataclass(frozen=True)
class Scenario:
    ops: list[tuple[Any, ...]]
    split: str | None  # None: sink(); "skip"/"fail": split with that unrouted policy
    payloads: list[bytes]
    many: bool
    not_ready_tries: int
    rejects: tuple[frozenset[int], frozenset[int]]
    bad_mod: int
    record_policy: ErrorPolicy
    deser_policy: ErrorPolicy
    meta: bool = False
    on_error: str = "fail"
    dl_rejects: frozenset[int] = frozenset()
    """Offer attempts the dead-letter sink refuses (B71: the chain stalls there)."""


def payload_strategy(many: bool) -> st.SearchStrategy[bytes]:
    single = st.one_of(
        st.integers(0, 40).map(lambda n: str(n).encode()),
        st.just(b""),
        st.just(b"x1"),
        st.integers(0, 40).map(lambda n: b"r" + str(n).encode()),
    )
    if not many:
        return single
    return st.one_of(
        st.lists(single.filter(bool), max_size=4).map(lambda parts: b",".join(parts)),
        st.just(b"!bad"),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    many = draw(st.booleans())
    return Scenario(
        ops=draw(st.lists(op_strategy, max_size=5)),
        split=draw(st.sampled_from([None, "skip", "fail"])),
        payloads=draw(st.lists(payload_strategy(many), max_size=12)),
        many=many,
        not_ready_tries=draw(st.integers(0, 2)),
        rejects=(
            draw(st.frozensets(st.integers(1, 30), max_size=6)),
            draw(st.frozensets(st.integers(1, 30), max_size=6)),
        ),
        bad_mod=draw(st.sampled_from([0, 5, 7])),
        record_policy=draw(st.sampled_from(list(ErrorPolicy))),
        deser_policy=draw(st.sampled_from(list(ErrorPolicy))),
        meta=draw(st.booleans()),
        on_error=draw(st.sampled_from(["fail", "dead_letter"])),
        dl_rejects=draw(st.frozensets(st.integers(1, 6), max_size=4)),
    )


def run(sc: Scenario, interpreted: bool, lazy: bool = False) -> dict[str, object]:
    """Run ``sc`` on one executor; ``lazy``: a batch of ``bytes`` values read lazily,
    to a deserializer that takes them (B97)."""
    log: list[tuple[str, object]] = []
    chains = build(sc.ops, log, sc.meta, sc.on_error)
    sinks = {
        name: RecordingSink(name, sc.rejects[n], sc.bad_mod, sc.record_policy)
        for n, name in enumerate(["a", "b"] if sc.split else ["a"])
    }
    ctx = ChainContext(sinks)
    chain = chains(ctx)
    if sc.split is None:
        spec = chain.sink()
    else:
        a, b = ctx.sink("a"), ctx.sink("b")

        def route(v: int, out: Any) -> None:
            if v % 3 == 1:
                out.emit(a, v)
            elif v % 3 == 2:
                out.emit(a, v)
                out.emit(b, -v)

        spec = chain.split(unrouted=sc.split).route(route)
    registry = CollectorRegistry()
    meter = Meter("p", registry)
    dl_sink = RecordingSink("dead_letter", sc.dl_rejects, 0, ErrorPolicy.FAIL)
    dead_letter = DeadLetter(
        dl_sink,
        DeadLetterSettings(max_consecutive=0, max_ratio=1),
        meter=meter,
        pipeline="p",
        kafka_format=False,
    )
    deser = (ManyIntDeser if sc.many else IntDeser)(sc.not_ready_tries, takes_bytes=lazy)
    processor = compile_chain(
        spec,
        deserializer=deser,
        sinks=sinks,
        meter=meter,
        pipeline="p",
        deser_policy=sc.deser_policy,
        interpreted=interpreted,
        dead_letter=dead_letter,
    )
    resolved: list[AckStatus] = []
    ack = AckToken(
        LANE, 0, 0, len(sc.payloads), len(sc.payloads), lambda t: resolved.append(t.status)
    )
    buffers = [memoryview(p) for p in sc.payloads]
    keys = [str(i).encode() for i in range(len(buffers))]
    if lazy:
        count = len(sc.payloads)
        batch = PayloadBatch.lazy(
            LANE,
            [bytes(p) for p in sc.payloads],
            first_offset=0,
            next_offset=count,
            offsets=lambda: list(range(count)),
            keys=lambda: keys,
            timestamps=lambda: [0] * count,
        )
    else:
        batch = PayloadBatch(
            LANE, list(range(len(buffers))), buffers, keys, [0] * len(buffers), len(buffers)
        )
    stalls: list[tuple[str, str | None]] = []
    error: str | None = None
    resume: object | None = None
    try:
        for _ in range(200):
            result = processor.process(batch, ack, resume)
            if result is None:
                break
            assert isinstance(result, Stalled)
            stalls.append((result.reason, result.sink))
            resume = result.cursor
        else:
            raise AssertionError("did not finish")
    except FatalError as exc:
        error = f"{exc.component}: {exc.reason}"
    ack.release(error is None)
    for sink in [*sinks.values(), dl_sink]:
        sink.release_all()
    metrics = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name.endswith("_total")
    }
    return {
        "rows": {name: sink.rows for name, sink in sinks.items()},
        "dead_letters": dl_sink.rows,
        "log": log,
        "stalls": stalls,
        "error": error,
        "metrics": metrics,
        "resolved": resolved,
        "inputs": deser.inputs,
    }


@settings(max_examples=scaled(300, minimum=60), deadline=None)
@given(scenarios())
def test_generated_loop_matches_interpreter_b3_b8_b28(sc: Scenario) -> None:
    fused = run(sc, interpreted=False)
    reference = run(sc, interpreted=True)
    assert fused == reference
    # Whatever happened, the ack resolved exactly once: dropped records never hold it (B3).
    assert len(fused["resolved"]) == 1  # type: ignore[arg-type]


@settings(max_examples=scaled(200, minimum=40), deadline=None)
@given(scenarios())
def test_lazy_bytes_batch_runs_like_a_batch_of_views_b97(sc: Scenario) -> None:
    """A batch of ``bytes`` values with lazily read fields, to a deserializer that takes
    ``bytes``, gives exactly what the views give, on both executors; the deserializer is
    handed the ``bytes`` themselves, never a view."""
    views = run(sc, interpreted=False)
    assert views.pop("inputs") <= {memoryview}
    for interpreted in (False, True):
        got = run(sc, interpreted=interpreted, lazy=True)
        assert got.pop("inputs") <= {bytes}
        assert got == views


def test_equivalence_harness_sees_differences() -> None:
    """The comparison is not vacuous: a scenario with drops and stalls records them."""
    sc = Scenario(
        ops=[("filter", 2), ("flat_map", 2), ("inspect",)],
        split="skip",
        payloads=[b"1", b"2", b"x1", b"", b"r5", b"7"],
        many=False,
        not_ready_tries=1,
        rejects=(frozenset({1}), frozenset()),
        bad_mod=0,
        record_policy=ErrorPolicy.SKIP,
        deser_policy=ErrorPolicy.SKIP,
    )
    result = run(sc, interpreted=False)
    assert result["stalls"] == [("sink_full", "a"), ("not_ready", None)]
    assert result["error"] is None
    assert result["resolved"] == [AckStatus.DELIVERED]
    assert result["log"]
    assert result["rows"]["a"]  # type: ignore[index]
