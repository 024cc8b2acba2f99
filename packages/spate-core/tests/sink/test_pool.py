"""The shared sink pool against scripted endpoints (B4, B7, B9 to B13, B28, B29).

The pool runs inline (``io_threads=0``) on a manual clock, so batching, backoff and
breaker timings are exact; one test runs the worker threads on the real clock.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest
from prometheus_client import CollectorRegistry
from spate import AckStatus, AckToken, ErrorClass, Lane, ManualClock, SinkError, SystemClock
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.sink import (
    BatchConfig,
    BreakerConfig,
    InflightConfig,
    Offer,
    PoolConfig,
    RetryConfig,
    ShardConfig,
    SinkPool,
)
from spate.testing import AckRecorder, delay, scripted_pool

from tests.support.scale import scaled

LANE = Lane("t", 0)


def Acks() -> AckRecorder:
    return AckRecorder(LANE)


def metric(meter: Meter, name: str, **labels: str) -> float:
    value = meter.registry.get_sample_value(name, {"pipeline": meter.pipeline, **labels})
    return 0.0 if value is None else value


def offer_all(pool: SinkPool, rows: list[object], ack: AckToken, key: bytes | None = None) -> None:
    """Offer every row; when the pool is full, let it write (inline) and offer again."""
    for row in rows:
        if pool.offer(row, key, LANE, ack) is Offer.REJECTED:
            pool.pump()
            assert pool.offer(row, key, LANE, ack) is Offer.ACCEPTED


def config(**parts: object) -> PoolConfig:
    return PoolConfig(**parts)  # type: ignore[arg-type]


# -- B10: sealing ------------------------------------------------------------------------


def test_b10_batch_seals_on_max_rows_and_tick() -> None:
    meter = Meter("p", CollectorRegistry())
    pool, ends = scripted_pool(config=config(batch=BatchConfig(max_rows=3)), meter=meter)
    pool.start()
    acks = Acks()
    ack = acks.new()
    offer_all(pool, list(range(7)), ack)
    ack.release()
    pool.pump()
    assert [w.rows for w in ends.written] == [(0, 1, 2), (3, 4, 5)]
    assert ack.status is AckStatus.PENDING  # row 6 is still in the open batch
    pool.tick()
    assert [w.rows for w in ends.written][-1] == (6,)
    assert acks.status == {1: AckStatus.DELIVERED}
    labels = {"component": "sink", "component_type": "scripted", "shard": "0"}
    assert metric(meter, "spate_sink_flushes_total", reason="max_rows", **labels) == 2
    assert metric(meter, "spate_sink_flushes_total", reason="tick", **labels) == 1
    assert metric(meter, "spate_sink_records_total", **labels) == 7


def test_b10_batch_seals_on_max_bytes() -> None:
    # A bytes row of n bytes is estimated at 49 + n: three 51-byte rows reach 300 >= 250.
    pool, ends = scripted_pool(config=config(batch=BatchConfig(max_bytes=250)))
    pool.start()
    ack = Acks().new()
    offer_all(pool, [b"x" * 51] * 4, ack)
    pool.pump()
    assert [len(w.rows) for w in ends.written] == [3]


def test_b10_batch_seals_on_linger_from_its_first_row() -> None:
    clock = ManualClock()
    pool, ends = scripted_pool(config=config(batch=BatchConfig(linger=1.0)), clock=clock)
    pool.start()
    ack = Acks().new()
    offer_all(pool, [1], ack)
    clock.advance(0.6)
    offer_all(pool, [2], ack)
    clock.advance(0.399)
    pool.pump()
    assert ends.written == []
    clock.advance(0.001)
    pool.pump()
    assert [w.rows for w in ends.written] == [(1, 2)]


def test_b10_flush_seals_partial_batches_on_drain() -> None:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = scripted_pool(shards=2, clock=clock, meter=meter)
    pool.start()
    acks = Acks()
    ack = acks.new()
    offer_all(pool, [1, 2], ack, key=b"k1")
    offer_all(pool, [3], ack, key=b"k2")
    ack.release()
    assert pool.flush(clock.monotonic() + 5) is True
    assert sorted(ends.rows()) == [1, 2, 3]  # type: ignore[type-var]
    assert acks.status == {1: AckStatus.DELIVERED}
    drained = sum(
        metric(
            meter,
            "spate_sink_flushes_total",
            component="sink",
            component_type="scripted",
            shard=str(s),
            reason="drain",
        )
        for s in (0, 1)
    )
    assert drained == len({pool.shard_of(b"k1", LANE), pool.shard_of(b"k2", LANE)})


# -- B9, B12: retries, tokens, backoff ---------------------------------------------------


def test_b9_retry_resends_same_rows_with_same_dedup_token() -> None:
    clock = ManualClock()
    pool, ends = scripted_pool(clock=clock, pipeline="orders", run_nonce="n1")
    ends.script("s0", "retryable", "retryable", "ok")
    pool.start()
    acks = Acks()
    ack = acks.new()
    offer_all(pool, ["a", "b"], ack)
    ack.release()
    assert pool.flush(clock.monotonic() + 60)
    attempts = ends.attempts_on("s0")
    assert [a.outcome for a in attempts] == ["retryable", "retryable", "ok"]
    assert {a.token for a in attempts} == {"orders-n1-0-1"}
    assert {a.rows for a in attempts} == {("a", "b")}
    assert [a.attempt for a in attempts] == [1, 2, 3]
    assert acks.status == {1: AckStatus.DELIVERED}


def test_b9_tokens_never_repeat_across_runs_or_batches() -> None:
    tokens: list[str] = []
    for nonce in ("run-a", "run-b"):
        clock = ManualClock()
        pool, ends = scripted_pool(
            shards=2, clock=clock, run_nonce=nonce, config=config(batch=BatchConfig(max_rows=1))
        )
        pool.start()
        ack = Acks().new()
        for i in range(4):
            offer_all(pool, [i], ack, key=str(i).encode())
        ack.release()
        assert pool.flush(clock.monotonic() + 1)
        tokens += [w.token for w in ends.written]
    assert len(tokens) == 8
    assert len(set(tokens)) == 8


def test_b12_backoff_is_exponential_capped_and_jitter_only_shortens() -> None:
    clock = ManualClock()
    retry = RetryConfig(initial=0.1, max=0.4, multiplier=2.0, jitter=0.5)
    draws = iter([0.0, 0.0, 0.0, 0.0, 0.999, 0.5])
    no_breaker = BreakerConfig(failure_threshold=100)
    pool, ends = scripted_pool(
        clock=clock, config=config(retry=retry, breaker=no_breaker), rng=lambda: next(draws)
    )
    ends.script("s0", "retryable", times=6)
    pool.start()
    ack = Acks().new()
    offer_all(pool, [1], ack)
    assert pool.flush(clock.monotonic() + 60)
    at = [a.at for a in ends.attempts]
    waits = [round(b - a, 6) for a, b in itertools.pairwise(at)]
    # 0.1, 0.2, 0.4, capped 0.4, then jitter shortens the capped 0.4 (never lengthens it).
    assert waits[:4] == [0.1, 0.2, 0.4, 0.4]
    assert waits[4] == pytest.approx(0.4 * (1 - 0.5 * 0.999), abs=1e-6)
    assert waits[5] == pytest.approx(0.4 * 0.75, abs=1e-6)
    assert all(w <= 0.4 + 1e-9 for w in waits)


def test_b12_max_attempts_fails_the_batch() -> None:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = scripted_pool(
        clock=clock, meter=meter, config=config(retry=RetryConfig(max_attempts=3))
    )
    ends.script("s0", "retryable", times=10)
    pool.start()
    acks = Acks()
    ack = acks.new()
    offer_all(pool, [1, 2], ack)
    ack.release()
    assert pool.flush(clock.monotonic() + 60) is True  # nothing left: the batch failed
    assert len(ends.attempts) == 3
    assert acks.status == {1: AckStatus.FAILED}
    labels = {"component": "sink", "component_type": "scripted", "shard": "0"}
    assert metric(meter, "spate_sink_abandoned_rows_total", **labels) == 2
    assert metric(meter, "spate_sink_retries_total", **labels) == 2


def test_b12_max_attempts_zero_retries_until_the_drain_deadline() -> None:
    clock = ManualClock()
    retry = RetryConfig(initial=0.1, max=1.0, max_attempts=0, jitter=0.0)
    breaker = BreakerConfig(failure_threshold=3, open_for=2.0)
    pool, ends = scripted_pool(clock=clock, config=config(retry=retry, breaker=breaker))
    ends.script("s0", "retryable", times=1000)
    pool.start()
    acks = Acks()
    ack = acks.new()
    offer_all(pool, [1], ack)
    ack.release()
    start = clock.monotonic()
    assert pool.flush(start + 10.0) is False
    assert clock.monotonic() == pytest.approx(start + 10.0)
    assert len(ends.attempts) > 5
    assert all(a.at <= start + 10.0 for a in ends.attempts)
    assert acks.status == {}  # still held, never silently delivered
    assert pool.abandon() == 1
    assert acks.status == {1: AckStatus.FAILED}


def test_b12_fatal_error_fails_at_once() -> None:
    clock = ManualClock()
    pool, ends = scripted_pool(clock=clock)
    ends.script("s0", "fatal")
    pool.start()
    acks = Acks()
    ack = acks.new()
    offer_all(pool, [1], ack)
    ack.release()
    assert pool.flush(clock.monotonic() + 60)
    assert [a.outcome for a in ends.attempts] == ["fatal"]
    assert acks.status == {1: AckStatus.FAILED}


def test_slow_write_delivers_without_failing() -> None:
    clock = ManualClock()
    pool, ends = scripted_pool(clock=clock)
    ends.script("s0", delay(30.0))
    pool.start()
    acks = Acks()
    ack = acks.new()
    offer_all(pool, [1], ack)
    ack.release()
    assert pool.flush(clock.monotonic() + 60)
    assert acks.status == {1: AckStatus.DELIVERED}


# -- B11: breakers and failover -----------------------------------------------------------


def test_b11_failover_stays_inside_the_shard() -> None:
    clock = ManualClock()
    pool, ends = scripted_pool(
        shards=[["a1", "a2"], ["b1"]],
        clock=clock,
        config=config(batch=BatchConfig(max_rows=1), retry=RetryConfig(jitter=0.0)),
    )
    pool.start()
    ends.down("a1")
    acks = Acks()
    ack = acks.new()
    keys = [str(i).encode() for i in range(40)]
    for k in keys:
        offer_all(pool, [k], ack, key=k)
    ack.release()
    assert pool.flush(clock.monotonic() + 60)
    assert acks.status == {1: AckStatus.DELIVERED}
    by_endpoint: dict[str, set[int]] = {}
    for w in ends.written:
        by_endpoint.setdefault(w.endpoint, set()).add(w.shard)
    assert by_endpoint.get("a2") == {0}
    assert by_endpoint.get("b1") == {1}
    assert "a1" not in by_endpoint
    for w in ends.written:
        assert pool.shard_of(w.rows[0], LANE) == w.shard  # type: ignore[arg-type]


def test_b11_shard_without_usable_replica_holds_writes_and_refuses_rows() -> None:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    cfg = config(
        batch=BatchConfig(max_rows=2),
        inflight=InflightConfig(max_per_shard=1),
        retry=RetryConfig(initial=0.1, max=0.1, jitter=0.0),
        breaker=BreakerConfig(failure_threshold=2, open_for=10.0, half_open_probes=1),
    )
    pool, ends = scripted_pool(shards=[["a"], ["b"]], clock=clock, meter=meter, config=cfg)
    pool.start()
    ends.down("a")
    acks = Acks()
    ack = acks.new()
    key_a = next(k for k in (str(i).encode() for i in range(100)) if pool.shard_of(k, LANE) == 0)
    key_b = next(k for k in (str(i).encode() for i in range(100)) if pool.shard_of(k, LANE) == 1)
    accepted = 0
    for i in range(50):
        if pool.offer(i, key_a, LANE, ack) is Offer.REJECTED:
            break
        accepted += 1
        pool.pump()
        clock.advance(0.1)
        pool.pump()
    else:
        pytest.fail("a shard with no usable replica must refuse rows")
    # The breaker opened after two failures; nothing went to shard b's replica.
    assert [a.endpoint for a in ends.attempts] == ["a", "a"]
    labels = {"component": "sink", "component_type": "scripted", "shard": "0", "replica": "a"}
    assert metric(meter, "spate_sink_breaker_open", **labels) == 1
    assert metric(meter, "spate_sink_replica_healthy", **labels) == 0
    # The other shard still takes rows.
    assert pool.offer("other", key_b, LANE, ack) is Offer.ACCEPTED
    # Bring the replica back: after open_for the breaker lets a trial through and closes.
    ends.down("a", False)
    clock.advance(10.0)
    ack.release()
    assert pool.flush(clock.monotonic() + 60)
    assert metric(meter, "spate_sink_breaker_open", **labels) == 0
    assert sorted(r for r in ends.rows() if r != "other") == list(range(accepted))  # type: ignore[type-var]
    assert acks.status == {1: AckStatus.DELIVERED}


# -- B13: routing -------------------------------------------------------------------------


def test_b13_fnv1a_known_values_and_weighted_placement() -> None:
    from spate.sink import WeightedHashRouter, fnv1a_64

    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8
    router = WeightedHashRouter([1, 3])
    for i in range(200):
        key = f"key-{i}".encode()
        expected = 0 if fnv1a_64(key) % 4 == 0 else 1
        assert router.route(None, key, LANE) == expected
    # Keyless records spread by partition through the same weight intervals.
    assert [router.route(None, None, Lane("t", p)) for p in range(8)] == [0, 1, 1, 1, 0, 1, 1, 1]


def test_b13_routing_a_column_of_keys_places_like_routing_row_by_row() -> None:
    """The columnar form of the Router contract: one call over a column of keys gives
    the shards that routing each row gives."""
    from spate.sink import WeightedHashRouter

    router = WeightedHashRouter([2, 1, 5])
    assert router.placed_by is None  # it places by the record key
    keys: list[bytes | None] = [f"user-{i}".encode() for i in range(300)] + [None] * 3
    for lane in (Lane("t", 0), Lane("t", 5)):
        rows = [router.route(("row", i), key, lane) for i, key in enumerate(keys)]
        assert router.route_column(keys, lane) == rows


def test_b13_routing_is_the_same_in_another_process() -> None:
    from spate.sink import WeightedHashRouter

    keys = [f"user-{i}".encode() for i in range(50)]
    here = [WeightedHashRouter([2, 1, 5]).route(None, k, LANE) for k in keys]
    code = (
        "from spate.sink import WeightedHashRouter\n"
        "from spate.records import Lane\n"
        "r = WeightedHashRouter([2, 1, 5])\n"
        "print([r.route(None, f'user-{i}'.encode(), Lane('t', 0)) for i in range(50)])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345"},
    )
    assert out.stdout.strip() == str(here)
    assert len(set(here)) == 3


# -- B28, B4, B7, B29 ---------------------------------------------------------------------


def test_b28_unencodable_row_is_refused_on_append_and_holds_nothing() -> None:
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = scripted_pool(clock=clock, meter=meter)
    ends.reject(lambda row: row == "bad")
    pool.start()
    acks = Acks()
    good, bad = acks.new(), acks.new()
    offer_all(pool, ["ok1"], good)
    with pytest.raises(SinkError) as info:
        pool.offer("bad", None, LANE, bad)
    assert info.value.error_class is ErrorClass.RECORD
    assert bad.holders == 1  # only the chain's own hold: the sink did not retain
    offer_all(pool, ["ok2"], good)
    good.release()
    bad.release()
    assert pool.flush(clock.monotonic() + 1)
    assert ends.rows() == ["ok1", "ok2"]
    assert acks.status == {1: AckStatus.DELIVERED, 2: AckStatus.DELIVERED}
    labels = {"component": "sink", "component_type": "scripted", "shard": "0"}
    assert metric(meter, "spate_sink_errors_total", error_class="record", **labels) == 1


def test_b4_abandon_and_close_fail_every_held_ack() -> None:
    clock = ManualClock()
    pool, ends = scripted_pool(clock=clock, config=config(batch=BatchConfig(max_rows=2)))
    ends.script("s0", "retryable", times=100)
    pool.start()
    acks = Acks()
    a1, a2 = acks.new(), acks.new()
    offer_all(pool, [1, 2], a1)  # sealed, fails and waits for a retry
    offer_all(pool, [3], a2)  # open
    a1.release()
    a2.release()
    pool.pump()
    assert pool.pending_rows() == 3
    pool.close()
    assert acks.status == {1: AckStatus.FAILED, 2: AckStatus.FAILED}
    assert pool.pending_rows() == 0
    assert ends.closed == ["s0"]


def test_b4_b39_the_pool_releases_every_ack_of_a_batch_even_when_one_raises() -> None:
    """A resolver that raises once used to stop the release loop: the batch's other acks
    stayed held forever and their lanes never committed again."""
    pool, _ = scripted_pool(budget=(budget := InflightBudget(1 << 20)))
    pool.start()
    calls: list[int] = []

    def raising_resolver(token: AckToken) -> None:
        calls.append(token.seq)
        raise RuntimeError("a resolver bug")

    acks = [AckToken(LANE, 0, seq, seq, 1, raising_resolver) for seq in range(5)]
    for seq, ack in enumerate(acks):
        offer_all(pool, [seq], ack)
        ack.release()  # the chain's hold; the batch still holds it
    assert budget.used > 0
    assert pool.flush(deadline=1e9)
    assert [a.status for a in acks] == [AckStatus.DELIVERED] * 5
    assert sorted(calls) == list(range(5))
    assert budget.used == 0


def test_b7_full_shard_refuses_rows_and_budget_is_returned() -> None:
    clock = ManualClock()
    budget = InflightBudget(10_000_000)
    cfg = config(batch=BatchConfig(max_rows=2), inflight=InflightConfig(max_per_shard=1))
    pool, ends = scripted_pool(clock=clock, budget=budget, config=cfg)
    ends.down("s0")
    with pytest.raises(SinkError):
        pool.start()
    ends.down("s0", False)
    pool.start()
    ends.down("s0")  # goes down after start-up
    ack = Acks().new()
    results = [pool.offer(i, None, LANE, ack) for i in range(4)]
    # Two rows fill a batch; one sealed batch may wait (nothing is being written while
    # the endpoint is down and no worker runs); the next batch cannot open.
    assert results == [Offer.ACCEPTED, Offer.ACCEPTED, Offer.REJECTED, Offer.REJECTED]
    assert budget.used > 0
    ends.down("s0", False)
    ack.release()
    assert pool.flush(clock.monotonic() + 60)
    assert budget.used == 0


def test_b29_start_fails_naming_the_unreachable_endpoint() -> None:
    pool, ends = scripted_pool(shards=[["ch-1:8123", "ch-2:8123"]])
    ends.down("ch-2:8123")
    with pytest.raises(SinkError) as info:
        pool.start()
    assert "ch-2:8123" in str(info.value)
    assert info.value.error_class is ErrorClass.FATAL
    assert not pool.ready()


def test_shard_config_errors_are_reported() -> None:
    from spate.config import decode
    from spate.errors import ConfigError

    with pytest.raises(ConfigError, match=r"shards\[0\]\.replicas: a shard needs"):
        decode(_Shards, {"shards": [{"weight": 2}]})
    with pytest.raises(ConfigError, match=r"retry\.jitter"):
        decode(PoolConfig, {"retry": {"jitter": 1.5}})
    with pytest.raises(ConfigError, match=r"batch\.max_rowz: unknown key"):
        decode(PoolConfig, {"batch": {"max_rowz": 1}})
    decoded = decode(PoolConfig, {"batch": {"max_bytes": "1MiB", "linger": "250ms"}})
    assert decoded.batch.max_bytes == 1024 * 1024
    assert decoded.batch.linger == 0.25


from dataclasses import dataclass, field  # noqa: E402


@dataclass(frozen=True, slots=True, kw_only=True)
class _Shards:
    shards: tuple[ShardConfig, ...] = field(default_factory=tuple)


# -- worker threads on the real clock ----------------------------------------------------


def test_worker_threads_write_everything_with_retries_on_the_real_clock() -> None:
    n = scaled(20_000, minimum=500)
    budget = InflightBudget(1 << 40)
    cfg = config(
        batch=BatchConfig(max_rows=250, linger=0.005),
        inflight=InflightConfig(max_per_shard=2),
        retry=RetryConfig(initial=0.001, max=0.004),
    )
    pool, ends = scripted_pool(
        shards=[["a1", "a2"], ["b1"]],
        clock=SystemClock(),
        io_threads=2,
        budget=budget,
        config=cfg,
    )
    ends.script("a1", "retryable", times=5)
    ends.script("b1", "retryable", "ok", "retryable", times=2)
    pool.start()
    acks = Acks()
    rejected = 0
    for start in range(0, n, 1000):
        ack = acks.new()
        for i in range(start, min(start + 1000, n)):
            while pool.offer(i, str(i).encode(), LANE, ack) is Offer.REJECTED:
                rejected += 1
                time.sleep(0.001)
        ack.release()
    assert pool.flush(time.monotonic() + 30)
    pool.close()
    written = ends.rows()
    assert sorted(set(written)) == list(range(n))  # type: ignore[type-var]
    assert len(written) == n  # retries resend, but a failed attempt writes nothing
    assert set(acks.status.values()) == {AckStatus.DELIVERED}
    assert budget.used == 0
    retried = {a.token for a in ends.attempts if a.outcome == "retryable"}
    assert retried and retried <= {w.token for w in ends.written}


def test_b40_flush_lanes_waits_for_those_lanes_batches_only_on_worker_threads() -> None:
    """A revoked lane's batch that needs retries is waited for; another shard's batch of
    another lane is neither sealed nor waited for."""
    cfg = config(batch=BatchConfig(max_rows=1000, linger=3600.0), retry=RetryConfig(initial=0.001))
    pool, ends = scripted_pool(shards=2, clock=SystemClock(), io_threads=2, config=cfg)
    ends.script("s0", "retryable", times=3)
    pool.start()
    lane0, lane1 = Lane("t", 0), Lane("t", 1)  # keyless: lane 0 -> s0, lane 1 -> s1
    a0 = AckToken(lane0, 0, 1, 5, 5, lambda t: None)
    a1 = AckToken(lane1, 0, 1, 5, 5, lambda t: None)
    for ack in (a0, a1):
        for i in range(5):
            assert pool.offer(i, None, ack.lane, ack) is Offer.ACCEPTED
        ack.release()
    assert pool.flush_lanes([lane0], time.monotonic() + 30)
    assert a0.status is AckStatus.DELIVERED
    assert a1.status is AckStatus.PENDING and ends.attempts_on("s1") == []
    assert pool.flush_lanes([Lane("t", 7)], time.monotonic() + 30)  # holds nothing: at once
    assert pool.pending_rows() == 5
    assert pool.flush(time.monotonic() + 30) and a1.status is AckStatus.DELIVERED
    pool.close()


def test_shard_config_requires_replicas() -> None:
    with pytest.raises(ValueError, match="at least one replica"):
        scripted_pool(shards=[ShardConfig()])


class _BuggyWriter:
    """A shard writer that raises the scripted exceptions, then writes."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.attempts = 0

    def probe(self) -> None:
        pass

    def write(self, batch: object) -> None:
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("error", "opens"),
    [
        (ValueError("a bug in the writer"), 0.0),
        (SinkError("refused", ErrorClass.FATAL), 0.0),
        (SinkError("outage", ErrorClass.RETRYABLE), 1.0),
    ],
    ids=["unexpected", "fatal", "retryable"],
)
def test_b160_only_a_retryable_failure_counts_against_the_breaker(
    error: Exception, opens: float
) -> None:
    """B160: the pool's workers end an attempt by the one rule the windowed engine uses:
    a writer's unexpected exception fails the batch at once as FATAL and, like a fatal
    error, leaves the replica's breaker closed; a retryable failure opens it."""
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    cfg = config(
        retry=RetryConfig(initial=1.0, max=1.0, jitter=0.0, max_attempts=1),
        breaker=BreakerConfig(failure_threshold=1, open_for=60.0),
    )
    pool, ends = scripted_pool(clock=clock, meter=meter, config=cfg)
    writer = _BuggyWriter([error])
    ends.open_writer = lambda shard, replica, endpoint: writer  # type: ignore[method-assign,assignment,return-value]
    pool.start()
    acks = Acks()
    ack = acks.new()
    offer_all(pool, [1], ack)
    ack.release()
    assert pool.flush(clock.monotonic() + 60)
    assert writer.attempts == 1 and acks.status == {1: AckStatus.FAILED}
    labels = {"component": "sink", "component_type": "scripted", "shard": "0", "replica": "s0"}
    assert metric(meter, "spate_sink_breaker_open", **labels) == opens
