"""Frames through the spool, the memory tier and the tee (columnar path): B151, B152,
with B55, B56, B28 and B58 on frames.

A deserializer that hands out polars frames drives the real
:class:`~spate.ops._columnar.FrameProcessor` into a tier in front of a
:class:`~spate.sink.SinkPool` over scripted endpoints that take Arrow tables, inline on
a manual clock.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from spate import AckStatus, AckToken, ErrorPolicy, Lane, ManualClock
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.ops import compile_chain
from spate.ops._compile import columnar_capable
from spate.records import PayloadBatch
from spate.sink import (
    JsonlStore,
    MemoryTier,
    MemoryTierConfig,
    PoolConfig,
    ShardConfig,
    SinkPool,
    SpoolConfig,
    SpoolCorruptError,
    SpoolTier,
    TeeSink,
)
from spate.sink._contract import Sink
from spate.sink.tiers._spool_codec import decode_frame, encode_frame
from spate.sink.tiers._store import read_records
from spate.testing import IntFrameDeserializer, ScriptedFrameEndpoints

pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")

LANE = Lane("t", 0)


FrameEndpoints = ScriptedFrameEndpoints
FrameDeser = IntFrameDeserializer


def frame_pool(
    clock: ManualClock, nonce: str = "run1", bad: int = -1, shards: int = 1
) -> tuple[SinkPool, FrameEndpoints]:
    endpoints = FrameEndpoints(clock, bad=bad)
    pool = SinkPool(
        "t",
        endpoints,
        shards=[ShardConfig(replicas=(f"s{i}",)) for i in range(shards)],
        pipeline="p",
        run_nonce=nonce,
        meter=Meter("p", CollectorRegistry()),
        clock=clock,
        budget=InflightBudget(1 << 30),
        io_threads=0,
        config=PoolConfig(),
    )
    return pool, endpoints


def spool_over(
    directory: Path, next_tier: Sink, clock: ManualClock, nonce: str = "run1", **cfg: Any
) -> SpoolTier:
    config = SpoolConfig(dir=str(directory), **cfg)
    store = JsonlStore(str(directory), nonce=nonce)
    return SpoolTier(
        "s", config, next_tier, store, meter=Meter("p", CollectorRegistry()), clock=clock
    )


def processor(sink: Sink, meter: Meter | None = None) -> Any:
    return compile_chain(
        None,
        deserializer=FrameDeser(),
        sinks={"sink": sink},
        meter=meter if meter is not None else Meter("p", CollectorRegistry()),
        pipeline="p",
        record_policy=ErrorPolicy.SKIP,
    )


def batch(values: list[int], first: int = 0) -> PayloadBatch:
    n = len(values)
    return PayloadBatch(
        LANE,
        list(range(first, first + n)),
        [memoryview(b"%d" % v) for v in values],
        [None] * n,
        [0] * n,
        n,
    )


def new_ack(results: dict[int, AckStatus], seq: int) -> AckToken:
    return AckToken(LANE, 0, seq, seq, 1, lambda t: results.__setitem__(t.seq, t.status))


def written(endpoints: FrameEndpoints) -> list[int]:
    return sorted(r[0] for w in endpoints.written for r in w.rows)


def metric(meter: Meter, name: str, **labels: str) -> float:
    value = meter.registry.get_sample_value(name, {"pipeline": "p", **labels})
    return 0.0 if value is None else value


# -- the spool (B151) ----------------------------------------------------------------------


def test_b151_a_spooled_pipeline_runs_columnar_and_stores_frames_as_arrow(
    tmp_path: Path,
) -> None:
    """A spool in front of a frame-taking pool keeps the pipeline on the columnar path;
    a frame batch is stored as one frame record per frame (Arrow IPC) and handed on
    whole; with ``ack: terminal`` the source ack resolves once the pool wrote it."""
    clock = ManualClock()
    pool, endpoints = frame_pool(clock)
    spool = spool_over(tmp_path, pool, clock)
    assert columnar_capable(FrameDeser(), {"sink": spool})
    spool.start()
    proc = processor(spool)
    assert type(proc).__name__ == "FrameProcessor"
    results: dict[int, AckStatus] = {}
    for seq, values in enumerate([[1, 2, 3], [4, 5]], start=1):
        ack = new_ack(results, seq)
        assert proc.process(batch(values), ack) is None
        ack.release()
    spool._seal(force_sync=True)
    (segment,) = [n for n in os.listdir(tmp_path) if n.endswith(".jsonl")]
    records = read_records(str(tmp_path / segment))
    assert [r[:1] for r in records] == [b"\x02", b"\x02"]
    frame, keys, lane = decode_frame(records[0])
    assert frame.get_column("n").to_list() == [1, 2, 3] and keys is None and lane == LANE  # type: ignore[attr-defined]
    assert results == {}
    spool.tick()
    spool.tick()
    assert written(endpoints) == [1, 2, 3, 4, 5]
    assert results == {1: AckStatus.DELIVERED, 2: AckStatus.DELIVERED}
    assert spool.flush(clock.monotonic() + 10)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".jsonl")] == []


def test_b151_b56_b9_a_replayed_frame_batch_reaches_the_pool_under_the_same_tokens(
    tmp_path: Path,
) -> None:
    """A crash after the pool wrote a spooled frame batch but before the spool noted it:
    the next run (a new run nonce) replays it as frames under the same dedup tokens."""
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"

    def run(directory: Path, nonce: str, offer: bool) -> list[str]:
        clock = ManualClock()
        pool, endpoints = frame_pool(clock, nonce, shards=2)
        spool = spool_over(directory, pool, clock, nonce, ack="spooled", max_records=100)
        spool.start()
        if offer:
            proc = processor(spool)
            for seq, values in enumerate([[1, 2, 3], [4, 5, 6, 7]], start=1):
                ack = new_ack({}, seq)
                assert proc.process(batch(values), ack) is None
                ack.release()
            spool.tick()
            spool.tick()
        else:
            spool.flush(clock.monotonic() + 60)
        assert written(endpoints) == [1, 2, 3, 4, 5, 6, 7]
        return sorted(a.token for a in endpoints.attempts)

    first = run(first_dir, "run1", offer=True)
    second_dir.mkdir()
    for name in os.listdir(first_dir):
        if name.endswith(".jsonl"):
            shutil.copy(first_dir / name, second_dir / name)
    replayed = run(second_dir, "run2", offer=False)
    assert first == replayed
    assert all("run1" in token and "run2" not in token for token in replayed)


def test_b151_b55_a_torn_frame_batch_is_cut_and_a_corrupt_one_fails_start_up(
    tmp_path: Path,
) -> None:
    """The store's framing and CRCs cover frame records as they cover rows (B55); a
    replayed frame reaches the next tier as a frame."""
    clock = ManualClock()
    pool, _ = frame_pool(clock)
    pool.start()
    spool = spool_over(tmp_path, pool, clock)
    proc = processor(spool)
    spool.start()
    for seq in (1, 2):
        ack = new_ack({}, seq)
        assert proc.process(batch([seq * 10, seq * 10 + 1]), ack) is None
        spool._seal(force_sync=True)  # two batches on disk, none handed on yet
    spool._writer.stop()
    spool._store.close()
    (segment,) = [tmp_path / n for n in os.listdir(tmp_path) if n.endswith(".jsonl")]
    data = segment.read_bytes()
    torn, corrupt = tmp_path / "torn", tmp_path / "corrupt"
    for directory in (torn, corrupt):
        directory.mkdir()
    (torn / segment.name).write_bytes(data[:-7])
    flipped = bytearray(data)
    flipped[-9] ^= 0xFF  # inside the last complete batch's Arrow stream
    (corrupt / segment.name).write_bytes(bytes(flipped))

    clock2 = ManualClock()
    pool2, endpoints2 = frame_pool(clock2, "run2")
    replay = spool_over(torn, pool2, clock2, "run2")
    replay.start()
    assert written(endpoints2) == [10, 11]  # the torn second batch is cut, not replayed
    replay.close()
    clock3 = ManualClock()
    broken = spool_over(corrupt, frame_pool(clock3, "run3")[0], clock3, "run3")
    with pytest.raises(SpoolCorruptError):
        broken.start()


def test_b151_b102_rows_the_terminal_refuses_when_the_frame_is_handed_on_fail_the_batch(
    tmp_path: Path,
) -> None:
    """The spool stores the chain's frame and the next tier checks it when it is handed
    on (the terminal may be down when the spool takes custody): its bad rows are left
    out, the frame's other rows are written once, and the batch counts as failed, so it
    stays in the spool (B102)."""
    clock = ManualClock()
    pool, endpoints = frame_pool(clock, bad=2)
    spool = spool_over(tmp_path, pool, clock)
    spool.start()
    proc = processor(spool)
    results: dict[int, AckStatus] = {}
    ack = new_ack(results, 1)
    assert proc.process(batch([1, 2, 3]), ack) is None
    ack.release()
    spool.tick()
    assert spool.flush(clock.monotonic() + 5)
    assert written(endpoints) == [1, 3]
    assert results == {1: AckStatus.FAILED}
    assert [n for n in os.listdir(tmp_path) if n.endswith(".jsonl")]  # replayed next start


def test_b151_b56_the_spool_takes_frames_while_the_terminal_cannot_start(
    tmp_path: Path,
) -> None:
    """With ``ack: spooled`` and the terminal down, frames are spooled and acked; once
    the terminal starts they are handed on (nothing asks the terminal meanwhile)."""
    clock = ManualClock()
    pool, endpoints = frame_pool(clock)
    down = [True]
    start = pool.start

    def start_when_up() -> None:
        if down[0]:
            raise RuntimeError("connection refused")
        start()

    pool.start = start_when_up  # type: ignore[method-assign]
    spool = spool_over(tmp_path, pool, clock, ack="spooled")
    spool.start()
    proc = processor(spool)
    results: dict[int, AckStatus] = {}
    ack = new_ack(results, 1)
    assert proc.process(batch([1, 2]), ack) is None
    ack.release()
    spool.tick()
    assert results == {1: AckStatus.DELIVERED} and written(endpoints) == []
    down[0] = False
    spool.tick()
    spool.tick()
    assert written(endpoints) == [1, 2]


def test_b151_b54_a_row_batch_and_a_frame_batch_never_share_a_spooled_batch(
    tmp_path: Path,
) -> None:
    """A frame offered while rows are open seals the rows first (and the other way
    round): each spooled batch is one kind, handed on in order."""
    clock = ManualClock()
    pool, _ = frame_pool(clock)
    spool = spool_over(tmp_path, pool, clock)
    spool.start()
    ack = new_ack({}, 1)
    frame = pl.DataFrame({"n": [7, 8]})
    assert spool.offer_frame(frame, None, LANE, ack) is not None
    assert spool._open is not None and spool._open.count == 2
    assert spool.offer(b"raw", None, LANE, ack) is not None
    assert spool._open is not None and spool._open.count == 1 and not spool._open.frames
    ack.release()
    spool.abandon()
    spool.close()


def test_b151_a_frame_its_keys_and_lane_survive_the_frame_record() -> None:
    keys: list[bytes | None] = [b"a", None, b"ccc"]
    frame = pl.DataFrame({"n": [1, 2, 3], "s": ["x", None, "z"], "l": [[1], [], [2, 3]]})
    decoded, got, lane = decode_frame(encode_frame(frame, keys, Lane("topic", 7)))
    assert isinstance(decoded, pl.DataFrame) and decoded.equals(frame)
    assert got == keys and lane == Lane("topic", 7)
    unkeyed, none, _ = decode_frame(encode_frame(frame, None, LANE))
    assert unkeyed.equals(frame) and none is None  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        decode_frame(encode_frame(frame, keys, LANE)[:-5])


# -- the memory tier and the tee (B152) --------------------------------------------------


def test_b152_the_memory_tier_holds_frames_whole_until_max_records() -> None:
    clock = ManualClock()
    pool, endpoints = frame_pool(clock)
    tier = MemoryTier(
        "m",
        MemoryTierConfig(max_records=5),
        pool,
        meter=Meter("p", CollectorRegistry()),
        clock=clock,
    )
    tier.start()
    assert columnar_capable(FrameDeser(), {"sink": tier})
    proc = processor(tier)
    results: dict[int, AckStatus] = {}
    first, second = new_ack(results, 1), new_ack(results, 2)
    assert proc.process(batch([1, 2, 3]), first) is None
    first.release()
    pool.tick()
    assert written(endpoints) == [] and results == {}  # 3 rows held: below max_records
    assert proc.process(batch([4, 5]), second) is None
    second.release()
    pool.tick()
    assert written(endpoints) == [1, 2, 3, 4, 5]
    assert results == {1: AckStatus.DELIVERED, 2: AckStatus.DELIVERED}


def test_b152_b58_a_tee_gives_every_branch_the_same_rows_and_charges_a_bad_one_once() -> None:
    """A record one branch refuses is one record error and is left out of both
    branches; the batch resolves once both branches wrote the rest."""
    clock = ManualClock()
    left, left_ends = frame_pool(clock, bad=2)
    right, right_ends = frame_pool(clock)
    tee = TeeSink("tee", [left, right], clock=clock)
    tee.start()
    assert tee.takes_frames and columnar_capable(FrameDeser(), {"sink": tee})
    meter = Meter("p", CollectorRegistry())
    proc = processor(tee, meter)
    results: dict[int, AckStatus] = {}
    ack = new_ack(results, 1)
    assert proc.process(batch([1, 2, 3, 2]), ack) is None
    ack.release()
    tee.tick()
    assert written(left_ends) == [1, 3]
    assert written(right_ends) == [1, 3]
    assert results == {1: AckStatus.DELIVERED}
    dropped = metric(
        meter,
        "spate_operator_dropped_total",
        component="chain",
        component_type="operators",
        reason="record_error",
    )
    assert dropped == 2  # offsets 1 and 3, each once


def test_b152_a_tee_branch_that_refuses_keeps_the_frame_in_its_backlog() -> None:
    """A branch full for now keeps its part in its backlog (offered once, whole); the
    tee refuses new frames until the backlog is handed on (B7)."""
    clock = ManualClock()
    left, left_ends = frame_pool(clock)
    right, right_ends = frame_pool(clock)
    tee = TeeSink("tee", [left, right], clock=clock)
    tee.start()
    prepared, bad = tee.prepare_frame(pl.DataFrame({"n": [1, 2], "__spate_row": [0, 1]}))
    assert not bad
    results: dict[int, AckStatus] = {}
    ack = new_ack(results, 1)
    refusals = iter([True])
    offer = right.offer_frame

    def full_once(*args: Any) -> Any:
        if next(refusals, False):
            from spate.sink import Offer

            return Offer.REJECTED
        return offer(*args)

    right.offer_frame = full_once  # type: ignore[method-assign]
    assert tee.offer_frame(prepared, None, LANE, ack).value == "accepted"
    assert len(tee._branches[1].backlog) == 1
    ack.release()
    tee.tick()
    left.tick()
    right.tick()
    assert written(left_ends) == [1, 2] and written(right_ends) == [1, 2]
    assert results == {1: AckStatus.DELIVERED}
