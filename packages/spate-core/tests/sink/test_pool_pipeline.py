"""A whole pipeline writing through the sink pool: memory source → chain → sharded pool.

Worker threads on the real clock, a replica down, retryable bursts: every record is
written at least once and the committed offsets reach the end (B2, B9, B11, B13). A
fatal write error fails the run and nothing is committed past the failed batch (B12).
"""

from __future__ import annotations

import json
from typing import Any

from spate import Lane, Pipeline, SystemClock
from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.metrics import Meter
from spate.sink import BatchConfig, BreakerConfig, PoolConfig, RetryConfig
from spate.testing import memory_source, scripted_pool

from tests.support.scale import scaled


class JsonDeser:
    many = False

    def deserialize(self, payload: memoryview) -> object:
        return json.loads(payload.tobytes())


def chains(ctx: Any) -> Any:
    return ctx.chain().filter(lambda ev: ev["n"] % 5 != 0).map(lambda ev: (ev["n"], ev["p"]))


def build(per_partition: int, **script: Any) -> tuple[Pipeline, Any, Any]:
    data = {
        p: [json.dumps({"n": p * 1_000_000 + i, "p": p}).encode() for i in range(per_partition)]
        for p in range(3)
    }
    keys = {p: [f"user-{i % 97}".encode() for i in range(per_partition)] for p in range(3)}
    source, handle = memory_source(data, stream="orders", batch_size=200, keys=keys)
    budget = Pipeline.new_budget(BackpressureConfig())
    meter = Meter("orders-pipe")
    pool, ends = scripted_pool(
        "events",
        shards=[["a1", "a2"], ["b1"]],
        clock=SystemClock(),
        io_threads=2,
        budget=budget,
        meter=meter,
        pipeline="orders-pipe",
        run_nonce="nonce-7",
        config=PoolConfig(
            batch=BatchConfig(max_rows=500, linger=0.01),
            retry=RetryConfig(initial=0.001, max=0.01, **script.pop("retry", {})),
            breaker=BreakerConfig(failure_threshold=2, open_for=0.05),
        ),
    )
    pipeline = Pipeline(
        "orders-pipe",
        source,
        {"events": pool},
        deserializer=JsonDeser(),
        checkpoint=CheckpointConfig(interval=0.1, drain_timeout=10.0),
        budget=budget,
        meter=meter,
        run_nonce="nonce-7",
        handle_signals=False,
    ).chains(chains)
    return pipeline, handle, ends


def test_b11_pipeline_through_the_pool_delivers_everything_despite_a_failing_replica() -> None:
    per_partition = scaled(6000, minimum=600)
    pipeline, handle, ends = build(per_partition)
    ends.script("a1", "retryable", times=100_000)  # a replica that went away after start
    ends.script("b1", "retryable", times=3)
    report = pipeline.run()
    assert report.exit_code == 0, report
    expected = {(p * 1_000_000 + i, p) for p in range(3) for i in range(per_partition)}
    expected = {row for row in expected if row[0] % 5 != 0}
    written = ends.rows()
    assert set(written) == expected
    assert {a.endpoint for a in ends.written} <= {"a2", "b1"}
    for p in range(3):
        assert handle.committed[Lane("orders", p)] == per_partition
    tokens = [w.token for w in ends.written]
    assert len(tokens) == len(set(tokens))
    assert all(t.startswith("orders-pipe-nonce-7-") for t in tokens)
    # One failure moved the shard's preference to a2, which then took every write.
    assert [a.outcome for a in ends.attempts_on("a1")] == ["retryable"]


def test_b12_fatal_write_fails_the_run_and_commits_nothing_past_it() -> None:
    per_partition = scaled(2000, minimum=400)
    pipeline, handle, ends = build(per_partition)
    ends.script("a1", "fatal")
    ends.script("a2", "fatal")
    report = pipeline.run()
    assert report.exit_code == 1
    failed_shard_attempts = [a for a in ends.attempts if a.outcome == "fatal"]
    assert failed_shard_attempts
    written = set(ends.rows())
    for p in range(3):
        committed = handle.committed.get(Lane("orders", p), 0)
        # Every record below the committed offset that produced a row is in the sink.
        for i in range(committed):
            n = p * 1_000_000 + i
            if n % 5 != 0:
                assert (n, p) in written
