"""The spool tier and its JSONL store (B54, B55, B56, B57; ADR 0005)."""

from __future__ import annotations

import datetime
import itertools
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from spate import AckStatus, AckToken, Lane, ManualClock
from spate._clock import SystemClock
from spate.metrics import Meter
from spate.sink import (
    BatchRef,
    JsonlStore,
    Offer,
    PoolConfig,
    SpoolConfig,
    SpoolCorruptError,
    SpoolTier,
)
from spate.sink.tiers._store import StoredBatch, read_records
from spate.testing import (
    STUCK,
    AckRecorder,
    CaptureScript,
    CaptureSink,
    ScriptedEndpoints,
    capture_sink,
    delay,
    scripted_pool,
)
from spate.testing.conformance import ConformanceFailure, StoreConformance

from tests.support.crash import died

LANE = Lane("t", 0)


def Acks() -> AckRecorder:
    return AckRecorder(LANE)


def metric(meter: Meter, name: str) -> float:
    labels = {"pipeline": meter.pipeline, "component": "s", "component_type": "spool"}
    value = meter.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def make(
    directory: Path, *, clock: ManualClock | None = None, **cfg: object
) -> tuple[SpoolTier, CaptureSink, CaptureScript, Meter]:
    clock = clock if clock is not None else ManualClock()
    meter = Meter("p", CollectorRegistry())
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    config = SpoolConfig(dir=str(directory), **cfg)  # type: ignore[arg-type]
    store = JsonlStore(str(directory), segment_bytes=config.segment_bytes)
    spool = SpoolTier("s", config, terminal, store, meter=meter, clock=clock)
    return spool, terminal, script, meter


def offer_batch(spool: SpoolTier, acks: Acks, rows: list[object]) -> AckToken:
    ack = acks.new()
    for row in rows:
        assert spool.offer(row, b"k", LANE, ack) is Offer.ACCEPTED
    ack.release()  # the chain's own hold
    return ack


def files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def recovered(directory: Path) -> list[StoredBatch]:
    """What a store in ``directory`` recovers (then closed, its lock given up)."""
    store = JsonlStore(str(directory))
    try:
        return store.recover()
    finally:
        store.close()


# -- custody: where the ack resolves (B54) -------------------------------------------------


def test_b54_ack_spooled_resolves_once_fsynced_while_the_terminal_is_stuck(
    tmp_path: Path,
) -> None:
    spool, _terminal, script, _ = make(tmp_path, ack="spooled")
    script.always(STUCK)
    spool.start()
    acks = Acks()
    ack = offer_batch(spool, acks, [{"i": i} for i in range(5)])
    assert ack.status is AckStatus.PENDING
    spool.tick()  # seals, appends and fsyncs the batch
    assert ack.status is AckStatus.DELIVERED
    assert script.rows == []
    assert files(tmp_path)  # the records are on disk, not yet in the terminal


def test_b54_ack_terminal_waits_for_the_terminal_then_deletes_the_segment(
    tmp_path: Path,
) -> None:
    spool, _terminal, script, _ = make(tmp_path, ack="terminal")
    script.then(delay(5))
    spool.start()
    acks = Acks()
    ack = offer_batch(spool, acks, [{"i": i} for i in range(5)])
    spool.tick()
    assert ack.status is AckStatus.PENDING
    assert files(tmp_path)
    script.always("ok")
    assert spool.flush(ManualClock().monotonic() + 1e9)
    assert ack.status is AckStatus.DELIVERED
    assert script.rows == [{"i": i} for i in range(5)]
    assert files(tmp_path) == []  # a clean drain leaves no segment


def test_b54_a_batch_the_terminal_failed_stays_for_the_next_run(tmp_path: Path) -> None:
    clock = ManualClock()
    spool, _terminal, script, first = make(tmp_path, clock=clock, ack="terminal")
    script.then("fatal")
    spool.start()
    acks = Acks()
    ack = offer_batch(spool, acks, [{"i": 1}, {"i": 2}])
    spool.tick()
    spool.flush(clock.monotonic() + 5)
    assert ack.status is AckStatus.FAILED  # the worst status wins (B2)
    clock.advance(600.0)
    spool.tick()  # ack: terminal never retries within the run (B66): the source does
    assert script.rows == [] and metric(first, "spate_spool_retried_batches_total") == 0
    spool.close()
    again, _, script2, meter = make(tmp_path)
    again.start()
    assert again.flush(ManualClock().monotonic() + 1e9)
    assert script2.rows == [{"i": 1}, {"i": 2}]
    assert metric(meter, "spate_spool_replayed_records_total") == 2
    assert files(tmp_path) == []


def test_b66_ack_spooled_retries_a_failed_batch_within_the_run(tmp_path: Path) -> None:
    """B66: with ``ack: spooled`` a batch the next tier failed is handed on again after a
    backoff within the same run, from the rows kept in memory, until it is accepted."""
    clock = ManualClock()
    spool, _terminal, script, meter = make(tmp_path, clock=clock, ack="spooled")
    script.then("fatal", times=2).always("ok")
    spool.start()
    acks = Acks()
    ack = offer_batch(spool, acks, [{"i": i} for i in range(5)])
    spool.tick()  # seal, fsync, release the source ack, hand on
    assert ack.status is AckStatus.DELIVERED  # custody passed to the spool
    for _ in range(200):
        spool.tick()
        if script.rows:
            break
        clock.advance(1.0)
    assert script.rows == [{"i": i} for i in range(5)]  # exactly once
    assert script.attempts == 3
    assert metric(meter, "spate_spool_retried_batches_total") == 2
    assert spool.flush(clock.monotonic() + 1e9)
    assert files(tmp_path) == []  # the spool ends empty within the run
    assert metric(meter, "spate_tier_held_records") == 0


def test_b66_a_batch_waiting_for_its_retry_stays_for_the_next_start(tmp_path: Path) -> None:
    """B66: drain does not wait out a retry's backoff; the batch is replayed next start."""
    clock = ManualClock()
    spool, _terminal, script, meter = make(tmp_path, clock=clock, ack="spooled")
    script.then("fatal")
    spool.start()
    offer_batch(spool, Acks(), [{"i": 1}, {"i": 2}])
    spool.tick()
    assert spool.flush(clock.monotonic() + 5)
    assert script.rows == [] and files(tmp_path)
    spool.close()
    assert metric(meter, "spate_spool_retried_batches_total") == 0
    again, _, script2, _ = make(tmp_path)
    again.start()
    assert again.flush(ManualClock().monotonic() + 1e9)
    assert script2.rows == [{"i": 1}, {"i": 2}]
    assert files(tmp_path) == []


def test_b54_rows_keys_lanes_and_bytes_survive_the_spool(tmp_path: Path) -> None:
    spool, _, script, _ = make(tmp_path, ack="spooled")
    script.always(STUCK)
    spool.start()
    ack = Acks().new()
    rows: list[object] = [{"a": [1, 2.5, None, "é"]}, b"\x00\xffraw", "text", 7]
    for row in rows:
        assert spool.offer(row, b"\x01\xfe", Lane("topic", 3), ack) is Offer.ACCEPTED
    spool.tick()
    spool.close()
    again, _, script2, _ = make(tmp_path)
    again.start()
    again.flush(ManualClock().monotonic() + 1e9)
    assert script2.rows == rows
    assert {(r.key, r.lane) for r in script2.records} == {(b"\x01\xfe", Lane("topic", 3))}


# -- recovery: torn tails and corruption (B55) ---------------------------------------------


def test_b55_torn_tail_is_cut_and_complete_batches_replay(tmp_path: Path) -> None:
    spool, _, script, _ = make(tmp_path, ack="terminal")
    script.always(STUCK)
    spool.start()
    acks = Acks()
    first = offer_batch(spool, acks, [{"i": 1}, {"i": 2}])
    spool.tick()
    second = offer_batch(spool, acks, [{"i": 3}, {"i": 4}])
    spool.tick()
    died(spool)
    (segment,) = files(tmp_path)
    path = tmp_path / segment
    data = path.read_bytes()
    # A crash in the middle of the second batch: cut inside its second record.
    cut = data.index(b'"i":4') + 2
    path.write_bytes(data[:cut])
    assert first.status is AckStatus.PENDING and second.status is AckStatus.PENDING
    again, _, script2, _ = make(tmp_path)
    again.start()
    again.flush(ManualClock().monotonic() + 1e9)
    assert script2.rows == [{"i": 1}, {"i": 2}]  # the torn batch was never acked either


def test_b55_read_records_leaves_out_a_torn_batch_and_changes_nothing(tmp_path: Path) -> None:
    """The read-only reader (for inspection while a spool runs) sees complete batches only."""
    spool, _, script, _ = make(tmp_path, ack="terminal")
    script.always(STUCK)
    spool.start()
    acks = Acks()
    offer_batch(spool, acks, [{"i": 1}, {"i": 2}])
    spool.tick()
    offer_batch(spool, acks, [{"i": 3}, {"i": 4}])
    spool.tick()
    (segment,) = files(tmp_path)
    path = tmp_path / segment
    data = path.read_bytes()
    torn = data[: data.index(b'"i":4') + 2]
    path.write_bytes(torn)
    records = read_records(str(path))
    assert [b'"i":1' in r or b'"i":2' in r for r in records] == [True, True]
    assert path.read_bytes() == torn  # nothing cut: recovery alone does that


def test_b55_corrupt_middle_fails_start_up_naming_segment_and_offset(tmp_path: Path) -> None:
    spool, _, script, _ = make(tmp_path, ack="spooled")
    script.always(STUCK)
    spool.start()
    acks = Acks()
    offer_batch(spool, acks, [{"i": 1}])
    spool.tick()
    offer_batch(spool, acks, [{"i": 2}])
    spool.tick()
    died(spool)
    (segment,) = files(tmp_path)
    path = tmp_path / segment
    data = bytearray(path.read_bytes())
    offset = data.index(b'"i":1')
    data[offset + 4] = ord("9")
    path.write_bytes(bytes(data))
    again, _, _, _ = make(tmp_path)
    with pytest.raises(SpoolCorruptError) as err:
        again.start()
    assert segment in str(err.value)
    # The record is in the first batch, which starts right after the segment header.
    assert f"at byte {len(b'spate-spool 3 ')}" in str(err.value)


_ROWS = st.tuples(
    st.one_of(st.binary(max_size=24), st.integers(0, 10**6).map(lambda v: {"v": v})),
    st.one_of(st.none(), st.binary(max_size=6)),
    st.sampled_from([LANE, Lane("u", 7)]),
)


def encoded_batch(batch: list[tuple[object, bytes | None, Lane]]) -> list[bytes]:
    """The records the spool writes for ``batch`` (as :meth:`SpoolTier.offer` and the
    seal encode them)."""
    from spate.sink.tiers._spool_codec import encode_batch, encode_record

    runs = [(i, r[2]) for i, r in enumerate(batch) if i == 0 or r[2] != batch[i - 1][2]]
    encoded = {i: encode_record(*r) for i, r in enumerate(batch) if type(r[0]) is not bytes}
    return encode_batch([r[0] for r in batch], [r[1] for r in batch], runs, encoded)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(_ROWS, min_size=1, max_size=6), min_size=1, max_size=6),
    cut=st.floats(0, 1),
)
def test_b55_b101_property_replay_yields_exactly_the_accepted_batches(
    batches: list[list[tuple[object, bytes | None, Lane]]], cut: float
) -> None:
    """Random batches (raw ``bytes`` rows in packed runs, dict rows as JSON, keys or
    none, two lanes), a crash at a random byte: replay yields exactly the rows of the
    batches whose append completed before that byte (each was fsynced before it was
    accepted)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = JsonlStore(tmp)
        assert store.recover() == []
        ends: list[int] = []
        for batch in batches:
            store.append(encoded_batch(batch))
            store.sync()
            ends.append(store.held_bytes())
        store.close()
        (segment,) = os.listdir(tmp)
        path = os.path.join(tmp, segment)
        size = os.path.getsize(path)
        at = int(size * cut)
        os.truncate(path, at)
        found = JsonlStore(tmp).recover()
        expected = [b for b, end in zip(batches, ends, strict=True) if end <= at]
        assert [decoded(s.records) for s in found] == expected


# -- replay on start (B56) -----------------------------------------------------------------


def test_b56_replay_goes_before_new_data_and_readiness_waits_for_it(tmp_path: Path) -> None:
    spool, _, script, _ = make(tmp_path, ack="spooled")
    script.always(STUCK)
    spool.start()
    offer_batch(spool, Acks(), [{"old": i} for i in range(3)])
    spool.tick()
    spool.close()
    clock = ManualClock()
    again, _terminal, script2, meter = make(tmp_path, clock=clock)
    script2.then(delay(5))  # the replayed batch's first write is slow
    again.start()
    assert not again.ready()  # replay handed on, not yet written
    assert metric(meter, "spate_spool_replayed_records_total") == 3
    acks = Acks()
    offer_batch(again, acks, [{"new": 1}])
    script2.always("ok")
    assert again.flush(clock.monotonic() + 1e9)
    assert again.ready()
    assert script2.rows == [{"old": 0}, {"old": 1}, {"old": 2}, {"new": 1}]


def test_b56_readyz_is_unready_while_a_replay_runs(tmp_path: Path) -> None:
    """A pipeline's ``/readyz`` answers 503 naming the spool while the records replayed
    on start are not yet written by the terminal, and 200 once they are (B56, B22)."""
    import threading
    import time
    import urllib.error
    import urllib.request

    from spate.admin import AdminServer
    from spate.config import CheckpointConfig
    from spate.pipeline import ExitReport, Pipeline
    from spate.testing import CopyToSinkProcessor, memory_source

    spool, _, script, _ = make(tmp_path, ack="spooled")
    script.always(STUCK)
    spool.start()
    offer_batch(spool, Acks(), [{"old": i} for i in range(3)])
    spool.tick()
    spool.close()

    terminal_clock = ManualClock()  # the replayed write finishes when the test says
    meter = Meter("replay-ready", CollectorRegistry())
    terminal, script2 = capture_sink("t", max_rows=1000, clock=terminal_clock)
    script2.then(delay(3600))
    config = SpoolConfig(dir=str(tmp_path), ack="spooled")
    store = JsonlStore(str(tmp_path), segment_bytes=config.segment_bytes)
    replaying = SpoolTier("s", config, terminal, store, meter=meter, clock=SystemClock())
    source, _handle = memory_source({0: [b"new"]}, bounded=False, batch_size=10)
    pipeline = Pipeline(
        "replay-ready",
        source,
        {"s": replaying},
        processor=CopyToSinkProcessor(replaying),
        checkpoint=CheckpointConfig(interval=0.05),
        meter=meter,
        handle_signals=False,
    )
    admin = AdminServer("127.0.0.1:0", registry=meter.registry, pipeline="replay-ready")
    pipeline.add_service(admin.start, admin.stop)

    def readyz() -> tuple[int, str]:
        assert admin.url is not None
        try:
            with urllib.request.urlopen(f"{admin.url}/readyz", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def wait_for(check: Callable[[int, str], bool]) -> tuple[int, str]:
        deadline = time.monotonic() + 30
        answer = (0, "")
        while time.monotonic() < deadline:
            if admin.url is not None:
                answer = readyz()
                if check(*answer):
                    break
            time.sleep(0.05)
        return answer

    reports: list[ExitReport] = []
    runner = threading.Thread(target=lambda: reports.append(pipeline.run()), daemon=True)
    runner.start()
    try:
        status, body = wait_for(lambda code, text: "sink s not ready" in text)
        assert (status, "sink s not ready" in body) == (503, True), body
        assert script2.rows == []  # the replay is handed on, not written
        for _ in range(5):  # it stays unready while the write waits
            assert readyz()[0] == 503
            time.sleep(0.05)
        terminal_clock.advance(3600)
        status, body = wait_for(lambda code, text: code == 200)
        assert status == 200, body
        assert script2.rows[:3] == [{"old": 0}, {"old": 1}, {"old": 2}]
    finally:
        pipeline.request_stop("test over")
        runner.join(timeout=30)
    assert reports and reports[0].exit_code == 0, reports


# -- max_bytes and a full disk (B57, B7) -----------------------------------------------------


def test_b57_over_max_bytes_the_spool_refuses_then_resumes(tmp_path: Path) -> None:
    spool, _, script, _ = make(
        tmp_path, ack="spooled", max_records=10, segment_bytes=400, max_bytes=800
    )
    script.always(STUCK)
    spool.start()
    acks = Acks()
    accepted = 0
    ack = acks.new()
    for i in range(1000):
        if spool.offer({"i": i, "pad": "x" * 20}, None, LANE, ack) is Offer.REJECTED:
            break
        accepted += 1
    ack.release()
    assert 0 < accepted < 1000
    assert spool.held_bytes() >= 800
    script.always("ok")
    spool._clock.advance(1)  # type: ignore[attr-defined]
    spool.tick()  # the writes in flight return; their batches go to the terminal
    spool.next.tick()
    spool.next.flush(spool._clock.monotonic() + 1e9)  # type: ignore[attr-defined]
    assert spool.offer({"i": "again"}, None, LANE, acks.new()) is Offer.ACCEPTED
    assert spool.flush(ManualClock().monotonic() + 1e9)
    rows = script.rows
    assert [r["i"] for r in rows] == [*range(accepted), "again"]  # type: ignore[index]


@pytest.fixture
def tiny_fs() -> Iterator[Path]:
    """A 64 KiB tmpfs mounted for the test and removed after it."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.fail("the ENOSPC test mounts a tmpfs and must run as root")
    where = Path(tempfile.mkdtemp(prefix="spate-enospc-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
        where.rmdir()


def test_b57_enospc_is_a_clear_error_and_nothing_unwritten_is_acked(
    tiny_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool, _, script, meter = make(
        tiny_fs, ack="spooled", max_records=50, segment_bytes=1 << 20, max_bytes=1 << 30
    )
    script.always(STUCK)
    spool.start()
    acks = Acks()
    tokens: list[AckToken] = []
    refused = False
    for _ in range(200):
        ack = acks.new()
        tokens.append(ack)
        for i in range(50):
            if spool.offer({"i": i, "pad": "y" * 100}, None, LANE, ack) is Offer.REJECTED:
                refused = True
                break
        ack.release()
        if refused:
            tokens.pop()  # no row of it was accepted: nothing to check
            break
    assert refused, "the spool never stopped accepting on a full disk"
    assert "No space left on device" in caplog.text
    assert metric(meter, "spate_spool_write_errors_total") >= 1
    delivered = [t for t in tokens if t.status is AckStatus.DELIVERED]
    pending = [t for t in tokens if t.status is AckStatus.PENDING]
    assert delivered and pending
    # Every delivered ack's records are on disk and come back; nothing else does.
    spool.abandon()
    spool.close()
    again, _, script2, _ = make(tiny_fs, max_records=50, segment_bytes=1 << 20, max_bytes=1 << 30)
    again.start()
    again.flush(ManualClock().monotonic() + 1e9)
    assert len(script2.rows) == 50 * len(delivered)
    assert all(t.status is not AckStatus.DELIVERED for t in pending)
    again.close()


def test_b54_typed_values_and_tuple_rows_survive_the_spool_encoding() -> None:
    import datetime
    import decimal

    from spate.sink.tiers._spool_codec import decode_record, encode_record

    when = datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    row = (1, when, decimal.Decimal("1.50"), b"\x00\xff", "é\n", {"a": [1, None]})
    assert decode_record(encode_record(row, None, LANE)) == (row, None, LANE)
    assert b"\n" not in encode_record(row, None, LANE)


def expected_records(rows: list[tuple[object, bytes | None, Lane]]) -> list[bytes]:
    """The records of one spooled batch of ``rows``: a run of one lane's rows that are
    all ``bytes`` is one packed record, any other run one JSON record per row (B101)."""
    from spate.sink.tiers._spool_codec import encode_record, pack_run

    records: list[bytes] = []
    for lane, group in itertools.groupby(rows, key=lambda r: r[2]):
        run = list(group)
        if all(type(row) is bytes for row, _, _ in run):
            records.append(pack_run([r for r, _, _ in run], [k for _, k, _ in run], lane))  # type: ignore[misc]
        else:
            records += [encode_record(*r) for r in run]
    return records


def decoded(records: list[bytes]) -> list[tuple[object, bytes | None, Lane]]:
    """``(row, key, lane)`` of each row the records hold, in order."""
    from spate.sink.tiers._spool_codec import decode_records

    return [
        (row, key, lane)
        for rows, keys, lane in decode_records(records)
        for row, key in zip(rows, keys, strict=True)
    ]


def assert_spooled_one_by_one(
    tmp_path: Path, rows: list[tuple[object, bytes | None, Lane]]
) -> None:
    """Spool ``rows`` (row, key, lane) in one batch: on disk, each lane run of ``bytes``
    rows is one packed record and each other row what :func:`encode_record` gives it
    alone; decoding hands back the rows (B54, B56, B101)."""

    spool, _, script, _ = make(tmp_path, ack="spooled")
    script.always(STUCK)
    spool.start()
    ack = Acks().new()
    for row, key, lane in rows:
        assert spool.offer(row, key, lane, ack) is Offer.ACCEPTED
    ack.release()
    spool.tick()
    spool.close()
    (segment,) = [n for n in files(tmp_path) if n.endswith(".jsonl")]
    records = read_records(str(tmp_path / segment))
    assert records == expected_records(rows)
    assert decoded(records) == rows


def test_b54_rows_encoded_with_their_batch_are_the_bytes_of_one_by_one_encoding(
    tmp_path: Path,
) -> None:
    """``bytes`` rows are encoded when their batch seals (keys or none, several lanes,
    any byte, mixed with dict rows): each record is what :func:`encode_record` gives it,
    and a replay hands back the same rows (B54, B56)."""
    other = Lane("u", 7)
    rows: list[tuple[object, bytes | None, Lane]] = [
        (b"plain", None, LANE),
        (bytes(range(256)), b'k\x00\xff"\n', LANE),
        ({"dict": 1}, b"k", LANE),
        (b'quote " backslash \\ newline \n', None, other),
        (b"", b"", other),
        (("t", 1), None, other),
        (b"last", b"key", LANE),
    ]
    assert_spooled_one_by_one(tmp_path, rows)


class TestJsonlStoreConformance(StoreConformance):
    """The built-in store passes the store conformance suite (B54, B55)."""

    def open_store(self, directory: Path) -> JsonlStore:
        return JsonlStore(str(directory), segment_bytes=256)


class _ForgetfulStore(JsonlStore):
    """Forgets to reclaim: releases nothing (a broken store the suite must catch)."""

    def release(self, ref: BatchRef) -> None:
        return None


def test_the_store_suite_fails_a_store_that_never_releases(tmp_path: Path) -> None:
    class Suite(StoreConformance):
        def open_store(self, directory: Path) -> JsonlStore:
            return _ForgetfulStore(str(directory))

    suite = Suite()
    suite.setup_method()
    try:
        with pytest.raises(ConformanceFailure, match="B54 broken"):
            suite.test_b54_released_batches_never_come_back()
    finally:
        suite.teardown_method()


def spool_over_pool(
    directory: Path, nonce: str, max_records: int, pool_config: PoolConfig | None = None
) -> tuple[SpoolTier, ScriptedEndpoints, ManualClock]:
    """An ``ack: spooled`` spool in ``directory`` in front of a two-shard scripted pool
    writing inline, both under run nonce ``nonce``."""
    clock = ManualClock()
    pool, endpoints = scripted_pool(
        "t", shards=2, run_nonce=nonce, clock=clock, config=pool_config, io_threads=0
    )
    config = SpoolConfig(dir=str(directory), ack="spooled", max_records=max_records)
    spool = SpoolTier(
        "s",
        config,
        pool,
        JsonlStore(str(directory), nonce=nonce),
        meter=Meter("p", CollectorRegistry()),
        clock=clock,
    )
    return spool, endpoints, clock


def test_b56_b9_a_replayed_batch_reaches_the_pool_under_the_same_dedup_tokens(
    tmp_path: Path,
) -> None:
    """A crash after the terminal wrote a spooled batch but before the spool noted it:
    the replay in a new run (new run nonce) is written under the same tokens, so a
    terminal that deduplicates by token drops it."""
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    rows = [{"i": i} for i in range(7)]

    def run(directory: Path, nonce: str, offer: bool) -> list[str]:
        spool, endpoints, clock = spool_over_pool(directory, nonce, 100)
        spool.start()
        if offer:
            ack = Acks().new()
            for i, row in enumerate(rows):
                assert spool.offer(row, b"%d" % i, LANE, ack) is Offer.ACCEPTED
            ack.release()
            spool.tick()
            spool.tick()
        else:
            spool.flush(clock.monotonic() + 60)
        tokens = sorted(a.token for a in endpoints.attempts)
        assert sorted(r["i"] for r in endpoints.rows()) == list(range(7))  # type: ignore[index]
        return tokens

    first = run(first_dir, "run1", offer=True)
    # The crash: the segment as written, without the note that it was delivered.
    second_dir.mkdir()
    for name in os.listdir(first_dir):
        if name.endswith(".jsonl"):
            shutil.copy(first_dir / name, second_dir / name)
    replayed = run(second_dir, "run2", offer=False)
    assert first == replayed
    assert all("run1" in token and "run2" not in token for token in replayed)


def _scripted_spool(
    directory: Path, clock: ManualClock, meter: Meter, *outcomes: str
) -> tuple[SpoolTier, Any]:
    """A started ``ack: spooled`` spool over a scripted pool (inline writes) whose one
    endpoint answers ``outcomes`` first; the spool and the endpoints."""
    from spate.testing import scripted_pool

    pool, endpoints = scripted_pool("t", shards=1, clock=clock, config=None, io_threads=0)
    endpoints.script("s0", *outcomes)
    config = SpoolConfig(dir=str(directory), ack="spooled", max_records=100)
    spool = SpoolTier("s", config, pool, JsonlStore(str(directory)), meter=meter, clock=clock)
    spool.start()
    return spool, endpoints


def test_b66_b9_a_retried_batch_reaches_the_pool_under_the_same_dedup_tokens(
    tmp_path: Path,
) -> None:
    """B66: the retry within the run is written under the tokens of the failed attempt,
    so a terminal that deduplicates by token drops an insert that did land."""
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    spool, endpoints = _scripted_spool(tmp_path, clock, meter, "fatal")
    offer_batch(spool, Acks(), [{"i": i} for i in range(7)])
    spool.tick()
    for _ in range(200):
        spool.tick()
        if endpoints.rows():
            break
        clock.advance(1.0)
    attempts = endpoints.attempts_on("s0")
    assert [a.outcome for a in attempts] == ["fatal", "ok"]
    assert attempts[0].token == attempts[1].token
    assert sorted(r["i"] for r in endpoints.rows()) == list(range(7))  # type: ignore[index]
    assert metric(meter, "spate_spool_retried_batches_total") == 1
    assert spool.flush(clock.monotonic() + 60)
    assert files(tmp_path) == []


def test_b322_a_batch_failed_for_good_is_kept_and_the_spool_stops(tmp_path: Path) -> None:
    """With ``ack: spooled`` a batch the terminal failed for good (``RowsFailed``: rows
    its destination refused under ``on_record_error: fail``) is not retried, unlike a
    plain fatal error (B66, above): the spool keeps it, hands nothing more on, is not
    ready and raises at every tick; a restart replays it and every later batch."""
    from spate.errors import FatalError

    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    spool, endpoints = _scripted_spool(tmp_path, clock, meter, "refused")
    acks = Acks()
    first = offer_batch(spool, acks, [{"i": i} for i in range(7)])
    with pytest.raises(FatalError, match=r"for good: .*scripted refusal"):
        spool.tick()
    assert first.status is AckStatus.DELIVERED  # acknowledged once spooled (B54)
    second = offer_batch(spool, acks, [{"i": i} for i in range(7, 10)])
    for _ in range(3):
        clock.advance(120.0)  # far past any retry's backoff
        with pytest.raises(FatalError, match="stops handing on"):
            spool.tick()
    assert second.status is AckStatus.DELIVERED
    assert not spool.ready()
    assert endpoints.rows() == []  # nothing handed on after the kept batch
    assert [a.outcome for a in endpoints.attempts_on("s0")] == ["refused"]
    assert metric(meter, "spate_spool_retried_batches_total") == 0
    spool.close()
    assert files(tmp_path)

    spool, endpoints = _scripted_spool(tmp_path, clock, meter)
    assert spool.flush(clock.monotonic() + 60)
    spool.close()
    assert sorted(r["i"] for r in endpoints.rows()) == list(range(10))  # type: ignore[index]
    assert files(tmp_path) == []


class _FailingSyncStore(JsonlStore):
    """A store whose next fsync fails (EIO), as a failing disk's would."""

    fail_next = True

    def sync(self) -> None:
        if self.fail_next:
            self.fail_next = False
            from spate import ErrorClass, SinkError

            raise SinkError("spool: fsync failed: Input/output error", ErrorClass.FATAL)
        super().sync()


def test_b57_a_failed_fsync_never_acknowledges_its_batch(tmp_path: Path) -> None:
    clock = ManualClock()
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    store = _FailingSyncStore(str(tmp_path))
    spool = SpoolTier(
        "s",
        SpoolConfig(dir=str(tmp_path), ack="spooled"),
        terminal,
        store,
        meter=Meter("p", CollectorRegistry()),
        clock=clock,
    )
    spool.start()
    acks = Acks()
    lost = offer_batch(spool, acks, [{"i": 1}])
    spool.tick()
    assert lost.status is AckStatus.FAILED  # never acknowledged, never handed on
    kept = offer_batch(spool, acks, [{"i": 2}])
    spool.tick()
    assert kept.status is AckStatus.DELIVERED
    assert spool.flush(clock.monotonic() + 60)
    assert script.rows == [{"i": 2}]


# -- the segment format: one CRC per batch, version 2 (B55) --------------------------------


def test_b55_b101_a_segment_is_versioned_and_checksums_each_batch_once(tmp_path: Path) -> None:
    """Format 3: the segment header, then per batch a 20-byte frame (CRC32 of the rest,
    record count, length, CRC32 of the frame), the records' lengths as one packed array
    and the records back to back — no per-record framing, any byte in a record."""
    store = JsonlStore(str(tmp_path))
    store.recover()
    first = store.append([b'{"a":1}', b"\x01raw\nbytes\x00"])
    second = store.append([b'{"a":3}'])
    store.sync()
    store.close()
    (segment,) = files(tmp_path)
    data = (tmp_path / segment).read_bytes()
    lengths = struct.pack("<II", 7, 11)
    payload = b'{"a":1}\x01raw\nbytes\x00'
    sizes = struct.pack("<IQ", 2, len(lengths) + len(payload))
    frame = struct.pack("<I", zlib.crc32(sizes + lengths + payload)) + sizes
    batch = frame + struct.pack("<I", zlib.crc32(frame)) + lengths + payload
    assert data.startswith(b"spate-spool 3\n" + batch)
    assert first.position == len(b"spate-spool 3\n")
    assert second.position == first.position + len(batch)
    assert data[second.position + 20 :] == struct.pack("<I", 7) + b'{"a":3}'
    assert [s.records for s in JsonlStore(str(tmp_path)).recover()] == [
        [b'{"a":1}', b"\x01raw\nbytes\x00"],
        [b'{"a":3}'],
    ]


V2_SEGMENT = Path(__file__).parent / "data" / "seg-000000000001-v2run.jsonl"
"""A format-2 segment written by the spool before format 3 (two batches: raw ``bytes``
rows with and without keys, a dict row, a tuple row, two lanes)."""

V2_ROWS: list[tuple[object, bytes | None, Lane]] = [
    (b"raw \x00\xff\n row", None, Lane("orders", 3)),
    (b"", b"k\n\x00", Lane("orders", 3)),
    ({"n": 1, "when": datetime.date(2024, 1, 2)}, b"key", Lane("orders", 3)),
    (b"other lane", None, Lane("événements", 0)),
    (("t", 2, None), None, Lane("événements", 0)),
    (b"last", b"", Lane("orders", 3)),
]


def test_b101_a_format_2_segment_left_by_an_upgrade_replays_under_its_identities(
    tmp_path: Path,
) -> None:
    """A spool directory written before format 3 still replays: every row, key and lane
    as written, under the identities the old run gave its batches (origin, segment and
    the batches' byte positions in that file), so a deduplicating terminal drops what it
    already holds; the segment is deleted once delivered (B101, B56)."""
    shutil.copy(V2_SEGMENT, tmp_path / V2_SEGMENT.name)
    refs = [b.ref for b in recovered(tmp_path)]
    assert [r.identity for r in refs] == ["v2run-1-14", "v2run-1-236"]
    spool, _, script, meter = make(tmp_path)
    spool.start()
    assert spool.flush(ManualClock().monotonic() + 1e9)
    assert [(r.row, r.key, r.lane) for r in script.records] == V2_ROWS
    assert metric(meter, "spate_spool_replayed_records_total") == len(V2_ROWS)
    assert files(tmp_path) == []


def test_b101_a_torn_format_2_tail_is_cut_and_a_corrupt_one_named(tmp_path: Path) -> None:
    """Format-2 segments keep their rules: a torn tail is cut at the last complete batch,
    a bad batch in an older segment fails start-up naming segment and offset (B55)."""
    data = V2_SEGMENT.read_bytes()
    (tmp_path / V2_SEGMENT.name).write_bytes(data[:-5])
    found = recovered(tmp_path)
    assert [len(b.records) for b in found] == [4]
    assert (tmp_path / V2_SEGMENT.name).stat().st_size == 236
    (tmp_path / V2_SEGMENT.name).write_bytes(data[:100] + b"X" + data[101:])
    # A newer (empty) segment: the old one is no longer the last, nothing of it is torn.
    (tmp_path / "seg-000000000002-newrun.jsonl").write_bytes(b"spate-spool 3\n")
    with pytest.raises(SpoolCorruptError) as err:
        JsonlStore(str(tmp_path)).recover()
    assert V2_SEGMENT.name in str(err.value) and "at byte 14" in str(err.value)


def test_b55_a_bad_batch_in_an_older_segment_is_corruption_not_a_torn_tail(
    tmp_path: Path,
) -> None:
    store = JsonlStore(str(tmp_path), segment_bytes=40)
    store.recover()
    store.append([b'{"a":1}'])
    store.append([b'{"a":2}'])  # rotates: the first segment is no longer the newest
    store.sync()
    store.close()
    older = tmp_path / files(tmp_path)[0]
    data = older.read_bytes()
    older.write_bytes(data[:-1])  # the older segment's only batch lost its last byte
    with pytest.raises(SpoolCorruptError) as err:
        JsonlStore(str(tmp_path)).recover()
    assert older.name in str(err.value) and "at byte 14" in str(err.value)


def test_b55_a_segment_without_the_format_header_fails_start_up(tmp_path: Path) -> None:
    """A segment that does not start with ``spate-spool 2`` (here lines framed one CRC
    per record, a format never released) is not guessed at: start-up fails naming the
    segment, and nothing in the directory is cut (B55)."""
    name = "seg-000000000001-oldrun.jsonl"
    lines = [b'{"a":1}', b'{"a":2}', b"#2", b'{"a":3}', b"#1"]
    data = b"".join(b"%08x %s\n" % (zlib.crc32(p), p) for p in lines)
    (tmp_path / name).write_bytes(data)
    with pytest.raises(SpoolCorruptError) as err:
        JsonlStore(str(tmp_path)).recover()
    assert name in str(err.value) and "at byte 0" in str(err.value)
    assert (tmp_path / name).read_bytes() == data
    with pytest.raises(SpoolCorruptError):
        read_records(str(tmp_path / name))


# -- per batch: the batch intake and the bulk hand-on (B54, B57, B7) -----------------------


def test_b54_unkeyed_bytes_rows_encoded_per_run_are_the_bytes_of_one_by_one_encoding(
    tmp_path: Path,
) -> None:
    """Raw ``bytes`` rows without keys (one orjson call per lane run) are spooled as
    :func:`encode_record` encodes each, whatever bytes they hold — quotes, the ``","``
    that separates the run's texts, backslashes, newlines, nothing — and replay as they
    were (B54, B56)."""
    other = Lane("u", 7)
    tricky = [b'","', b'\\","\\', b'"', b"\\", b"", b"a\nb", bytes(range(256)), b'x"],["y']
    rows = [(row, None, lane) for lane in (LANE, other, LANE) for row in tricky]
    assert_spooled_one_by_one(tmp_path, rows)


def offer_rows_at_once(
    spool: SpoolTier, rows: list[object], keys: list[bytes | None], ack: AckToken
) -> Offer:
    """A source batch's rows into ``spool`` the way the chain hands them (B95)."""
    prepared, bad = spool.prepare_rows(rows, keys, LANE)
    assert not bad
    return spool.offer_rows(prepared, LANE, ack)


def test_b57_offer_rows_takes_a_source_batch_whole_or_not_at_all(tmp_path: Path) -> None:
    """``offer_rows`` spools one source batch's rows at once, split over batches of
    ``max_records``; while the spool is full it takes none of them (B57, B7), and a row
    that cannot be spooled is a record error of its own at preparation (B3, B95)."""
    spool, _, script, _ = make(
        tmp_path, ack="spooled", max_records=4, segment_bytes=400, max_bytes=800
    )
    script.always(STUCK)
    spool.start()
    acks = Acks()
    first = acks.new()
    rows: list[object] = [b"a", {"d": 1}, b"b", b"c", ("t", 2), b"e", b"f"]
    keys: list[bytes | None] = [None, b"k", None, None, None, b"k2", None]
    assert offer_rows_at_once(spool, rows, keys, first) is Offer.ACCEPTED
    first.release()
    _, bad = spool.prepare_rows([b"ok", object(), b"ok"], [None, None, None], LANE)
    assert [position for position, _ in bad] == [1]
    assert "cannot be spooled" in bad[0][1]
    spool.tick()  # the last 3 rows; preparing took nothing
    assert first.status is AckStatus.DELIVERED
    taken = 0
    while spool.held_bytes() < 800:
        ack = acks.new()
        assert offer_rows_at_once(spool, [b"x" * 40] * 4, [None] * 4, ack) is Offer.ACCEPTED
        ack.release()
        spool.tick()
        taken += 4
    refused = acks.new()
    assert offer_rows_at_once(spool, [b"y"] * 3, [None] * 3, refused) is Offer.REJECTED
    refused.release()
    assert refused.status is AckStatus.DELIVERED  # no row of it is held by the spool
    spool.close()
    segments = sorted(n for n in files(tmp_path) if n.endswith(".jsonl"))
    on_disk = decoded([r for n in segments for r in read_records(str(tmp_path / n))])
    assert on_disk == [
        *((row, key, LANE) for row, key in zip(rows, keys, strict=True)),
        *[(b"x" * 40, None, LANE)] * taken,
    ]


class BulkNext:
    """A next tier with ``offer_rows`` over a capture sink; records each call's size and
    refuses the first ``refuse`` calls."""

    def __init__(self, inner: CaptureSink, refuse: int = 0) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[int] = []
        self.refuse = refuse

    takes_rows = True

    def prepare_rows(
        self, rows: list[object], keys: list[bytes | None], lane: Lane
    ) -> tuple[tuple[list[object], list[bytes | None]], list[tuple[int, str]]]:
        return (rows, keys), []

    def offer_rows(
        self, prepared: tuple[list[object], list[bytes | None]], lane: Lane, ack: AckToken
    ) -> Offer:
        rows, keys = prepared
        if self.refuse:
            self.refuse -= 1
            return Offer.REJECTED
        self.calls.append(len(rows))
        for row, key in zip(rows, keys, strict=True):
            assert self.inner.offer(row, key, lane, ack) is Offer.ACCEPTED
        return Offer.ACCEPTED

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        raise AssertionError("rows go in bulk to a next tier with offer_rows")

    def start(self) -> None:
        self.inner.start()

    def tick(self) -> None:
        self.inner.tick()

    def flush(self, deadline: float) -> bool:
        return self.inner.flush(deadline)

    def abandon(self) -> int:
        return self.inner.abandon()

    def ready(self) -> bool:
        return self.inner.ready()

    def close(self) -> None:
        self.inner.close()


def test_b54_a_spooled_batch_goes_to_a_next_tier_with_offer_rows_one_call_per_lane_run(
    tmp_path: Path,
) -> None:
    """The spool hands each durable batch on with one ``offer_rows`` call per run of one
    lane's rows; a refused call is repeated later with the same rows, none doubled (B54)."""
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    bulk = BulkNext(terminal, refuse=2)
    config = SpoolConfig(dir=str(tmp_path), ack="terminal")
    store = JsonlStore(str(tmp_path), segment_bytes=config.segment_bytes)
    spool = SpoolTier("s", config, bulk, store, meter=meter, clock=clock)
    spool.start()
    other = Lane("u", 1)
    ack = Acks().new()
    rows = [(b"%d" % i, None, LANE if i < 5 or i >= 8 else other) for i in range(10)]
    for row, key, lane in rows:
        assert spool.offer(row, key, lane, ack) is Offer.ACCEPTED
    ack.release()
    spool.tick()  # durable; both hand-ons of the tick are refused
    assert bulk.calls == [] and ack.status is AckStatus.PENDING
    assert spool.flush(clock.monotonic() + 1e9)
    assert bulk.calls == [5, 3, 2]
    assert [(r.row, r.lane) for r in script.records] == [(r, ln) for r, _, ln in rows]
    assert ack.status is AckStatus.DELIVERED
    assert files(tmp_path) == []


def test_b102_a_row_the_terminal_refuses_is_one_record_error_not_two(tmp_path: Path) -> None:
    """A spooled row the terminal refuses when it checks a batch's rows at once
    (``prepare_rows``, B95) is one record error, not one there and one more for a
    row-by-row re-offer; the other rows are written once and the batch counts as failed,
    so it stays in the spool (B102, B54)."""
    from spate.testing import scripted_pool

    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    pool, ends = scripted_pool("t", clock=clock, meter=meter, takes_rows=True)
    ends.reject(lambda row: row == b"bad")
    config = SpoolConfig(dir=str(tmp_path), ack="terminal")
    spool = SpoolTier("s", config, pool, JsonlStore(str(tmp_path)), meter=meter, clock=clock)
    spool.start()
    ack = Acks().new()
    rows: list[object] = [b"a", b"bad", b"b", b"bad"]
    assert offer_rows_at_once(spool, rows, [None] * 4, ack) is Offer.ACCEPTED
    ack.release()
    spool.tick()
    assert spool.flush(clock.monotonic() + 5)  # the next tier holds nothing more
    labels = {"pipeline": "p", "component": "t", "component_type": "scripted", "shard": "0"}
    errors = meter.registry.get_sample_value(
        "spate_sink_errors_total", {**labels, "error_class": "record"}
    )
    assert errors == 2  # two bad rows, each counted once
    assert ends.rows() == [b"a", b"b"]
    assert ack.status is AckStatus.FAILED
    assert [n for n in files(tmp_path) if n.endswith(".jsonl")]  # replayed on the next start


class _RefusingBulkNext(BulkNext):
    """Refuses ``b"bad"`` rows when it prepares a run; counts how often it prepares."""

    preparations = 0

    def prepare_rows(
        self, rows: list[object], keys: list[bytes | None], lane: Lane
    ) -> tuple[tuple[list[object], list[bytes | None]], list[tuple[int, str]]]:
        self.preparations += 1
        bad = [(i, "bad row") for i, row in enumerate(rows) if row == b"bad"]
        kept = [i for i, row in enumerate(rows) if row != b"bad"]
        return ([rows[i] for i in kept], [keys[i] for i in kept]), bad


def test_b102_a_run_refused_for_now_is_offered_again_not_prepared_again(tmp_path: Path) -> None:
    """The next tier refuses the prepared rows for now (full): the spool offers the same
    prepared rows later instead of preparing (and counting the bad rows) again (B102)."""
    clock = ManualClock()
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    bulk = _RefusingBulkNext(terminal, refuse=2)
    config = SpoolConfig(dir=str(tmp_path), ack="terminal")
    store = JsonlStore(str(tmp_path))
    spool = SpoolTier("s", config, bulk, store, meter=Meter("p", CollectorRegistry()), clock=clock)
    spool.start()
    ack = Acks().new()
    rows: list[object] = [b"a", b"bad", b"b"]
    assert offer_rows_at_once(spool, rows, [None] * 3, ack) is Offer.ACCEPTED
    ack.release()
    spool.tick()
    spool.flush(clock.monotonic() + 5)
    assert bulk.preparations == 1 and bulk.calls == [2]
    assert script.rows == [b"a", b"b"]
    assert ack.status is AckStatus.FAILED


# -- the write and fsync off the pipeline thread (B54, B57, B40) ----------------------------


class _GatedStore(JsonlStore):
    """A store whose appends or fsyncs wait for the test to open a gate (a slow disk)."""

    def __init__(self, directory: str, *, gate: Literal["append", "sync"]) -> None:
        super().__init__(directory)
        self.gate = gate
        self.entered = threading.Event()
        self.open = threading.Event()
        self.returned = threading.Event()

    def _wait(self, step: str) -> None:
        if step == self.gate:
            self.entered.set()
            assert self.open.wait(60), "the test never opened the gate"

    def append(self, records: Sequence[bytes]) -> BatchRef:
        self._wait("append")
        return super().append(records)

    def sync(self) -> None:
        self._wait("sync")
        super().sync()
        if self.gate == "sync":
            self.returned.set()


def _gated(
    tmp_path: Path, gate: Literal["append", "sync"], **cfg: object
) -> tuple[SpoolTier, _GatedStore, CaptureScript]:
    clock = ManualClock()
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    store = _GatedStore(str(tmp_path), gate=gate)
    config = SpoolConfig(dir=str(tmp_path), **cfg)  # type: ignore[arg-type]
    spool = SpoolTier(
        "s", config, terminal, store, meter=Meter("p", CollectorRegistry()), clock=clock
    )
    return spool, store, script


def _in_thread(work: Callable[[], object]) -> tuple[threading.Event, list[object]]:
    """Run ``work`` on a thread; the event is set once it returned (with its result)."""
    done = threading.Event()
    result: list[object] = []

    def run() -> None:
        result.append(work())
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, result


def test_b54_an_ack_resolves_only_after_its_fsync_returned_and_intake_goes_on_meanwhile(
    tmp_path: Path,
) -> None:
    """B54: the fsync runs off the pipeline thread — while it is blocked the spool keeps
    taking rows, and the ack of the batch being synced stays unresolved until the fsync
    returned (``ack: spooled``)."""
    spool, store, script = _gated(tmp_path, "sync", ack="spooled", max_records=3)
    spool.start()
    acks = Acks()
    first = offer_batch(spool, acks, [b"a", b"b", b"c"])  # fills the batch: it seals
    assert store.entered.wait(60)
    # The pipeline thread is not held by the fsync: the next rows go into a new batch.
    offered, _ = _in_thread(lambda: offer_batch(spool, acks, [b"d", b"e"]))
    assert offered.wait(60), "an offer waited for another batch's fsync"
    assert first.status is AckStatus.PENDING  # fsync has not returned
    assert not store.returned.is_set()
    store.open.set()
    spool.tick()  # waits for the writes in flight, syncs the open batch
    assert store.returned.is_set()
    assert first.status is AckStatus.DELIVERED
    assert spool.flush(ManualClock().monotonic() + 1e9)
    assert script.rows == [b"a", b"b", b"c", b"d", b"e"]  # the order of the offers


def test_b57_b7_bytes_not_yet_written_count_toward_max_bytes(tmp_path: Path) -> None:
    """B57, B7: sealed batches waiting for the background write count toward
    ``max_bytes``: while the disk is stuck the spool refuses rows (the source pauses)
    instead of holding ever more batches in memory or blocking the pipeline thread."""
    spool, store, _ = _gated(
        tmp_path, "append", ack="spooled", max_records=10, segment_bytes=400, max_bytes=800
    )
    spool.start()
    ack = Acks().new()

    def offer_until_refused() -> int:
        for i in range(1000):
            if spool.offer({"i": i, "pad": "x" * 20}, None, LANE, ack) is Offer.REJECTED:
                return i
        return 1000

    done, accepted = _in_thread(offer_until_refused)
    assert done.wait(60), "the pipeline thread blocked instead of refusing"
    assert 0 < accepted[0] < 1000  # type: ignore[operator]
    assert store.held_bytes() == 0  # nothing written yet: the refusal counted pending bytes
    assert spool.held_bytes() >= 800
    store.open.set()
    ack.release()
    spool.tick()
    assert store.held_bytes() > 0 and ack.status is AckStatus.DELIVERED


def test_b40_b54_flush_waits_for_the_fsync_in_flight(tmp_path: Path) -> None:
    """B40, B54: a drain or revocation's flush returns only after the fsyncs in flight
    returned and their batches were handed on; nothing is acknowledged before."""
    spool, store, script = _gated(tmp_path, "sync", ack="terminal", max_records=2)
    spool.start()
    acks = Acks()
    ack = offer_batch(spool, acks, [b"a", b"b"])
    assert store.entered.wait(60)
    flushed, result = _in_thread(lambda: spool.flush(ManualClock().monotonic() + 1e9))
    assert not flushed.wait(0.2)  # not a timing assertion: it cannot return before the gate
    assert ack.status is AckStatus.PENDING and script.rows == []
    store.open.set()
    assert flushed.wait(60) and result == [True]
    assert ack.status is AckStatus.DELIVERED and script.rows == [b"a", b"b"]


class _FullDiskStore(JsonlStore):
    """A store whose appends fail with ENOSPC until the test frees the disk."""

    full = True

    def append(self, records: Sequence[bytes]) -> BatchRef:
        if self.full:
            from spate import ErrorClass, SinkError

            raise SinkError(
                "spool: writing a batch failed: No space left on device", ErrorClass.RETRYABLE
            )
        return super().append(records)


def test_b57_a_failed_background_write_leaves_the_batch_unacked_and_pauses_intake(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """B57: an append that fails on the writer thread (ENOSPC) is logged as a clear error;
    its batch stays unacknowledged, intake is refused until the write works again, and
    the batch is then written and acknowledged in its place."""
    clock = ManualClock()
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    store = _FullDiskStore(str(tmp_path))
    config = SpoolConfig(dir=str(tmp_path), ack="spooled", max_records=2)
    spool = SpoolTier(
        "s", config, terminal, store, meter=Meter("p", CollectorRegistry()), clock=clock
    )
    spool.start()
    acks = Acks()
    first = offer_batch(spool, acks, [b"a", b"b"])
    spool.tick()
    assert "No space left on device" in caplog.text
    assert first.status is AckStatus.PENDING
    assert spool.offer(b"c", None, LANE, acks.new()) is Offer.REJECTED
    store.full = False
    later = offer_batch(spool, acks, [b"c"])
    spool.tick()
    assert first.status is AckStatus.DELIVERED and later.status is AckStatus.DELIVERED
    assert spool.flush(clock.monotonic() + 60)
    assert script.rows == [b"a", b"b", b"c"]


def test_b54_b7_the_store_answers_held_bytes_while_an_fsync_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B54, B7: the JSONL store's fsync does not hold its lock, so the pipeline thread's
    ``max_bytes`` check (``held_bytes``) and releases from sink threads do not wait for
    the writer thread's fsync."""
    import spate.sink.tiers._store as store_module

    entered, gate = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        entered.set()
        assert gate.wait(60), "the test never opened the gate"
        real_fsync(fd)

    store = JsonlStore(str(tmp_path))
    store.recover()
    store.append([b"record"])
    monkeypatch.setattr(store_module.os, "fsync", slow_fsync)
    synced, _ = _in_thread(store.sync)
    assert entered.wait(60)
    answered, held = _in_thread(store.held_bytes)
    assert answered.wait(60), "held_bytes waited for the fsync"
    assert held[0] > 0 and not synced.is_set()
    gate.set()
    assert synced.wait(60)


def test_b55_a_flipped_byte_in_the_last_complete_batch_is_corruption_not_a_torn_tail(
    tmp_path: Path,
) -> None:
    """The newest segment's last batch, complete (a valid frame, then a body of the
    length the frame declares) but with a bad body CRC, was fsynced and acknowledged: a
    flipped byte is media corruption, not a torn write. Start-up fails naming the segment
    and the batch's offset, and nothing in the directory is cut (B55)."""
    store = JsonlStore(str(tmp_path))
    store.recover()
    store.append([b'{"a":1}'])
    last = store.append([b'{"a":2}', b'{"a":3}'])
    store.sync()
    store.close()
    (segment,) = files(tmp_path)
    path = tmp_path / segment
    data = bytearray(path.read_bytes())
    data[data.index(b'"a":3') + 4] = ord("7")  # the body only: its frame stays valid
    path.write_bytes(bytes(data))
    with pytest.raises(SpoolCorruptError) as err:
        JsonlStore(str(tmp_path)).recover()
    assert segment in str(err.value) and f"at byte {last.position}" in str(err.value)
    assert "bad CRC" in str(err.value)
    assert path.read_bytes() == bytes(data)  # nothing cut
    # A torn write of the same batch (its body cut short) is still cut, not corruption.
    path.write_bytes(bytes(data[:-3]))
    assert [s.records for s in recovered(tmp_path)] == [[b'{"a":1}']]
    assert path.stat().st_size == last.position


class _HungSyncStore(JsonlStore):
    """A store whose fsync never returns until the test lets it (a hung network disk)."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.entered = threading.Event()
        self.let_go = threading.Event()

    def sync(self) -> None:
        self.entered.set()
        self.let_go.wait()
        super().sync()


def test_b14_b54_a_drain_over_a_hung_fsync_abandons_within_bounds_and_keeps_the_data(
    tmp_path: Path,
) -> None:
    """SIGTERM while the spool's fsync never returns: the drain's flush gives up at its
    deadline and ``abandon()`` waits for the writer thread only so long, fails the acks
    of what was not durable (B4) and logs it; ``close()`` returns too. The records stay
    on disk: once the disk answers, the next start replays them (B14, B54)."""
    clock = SystemClock()
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    store = _HungSyncStore(str(tmp_path))
    spool = SpoolTier(
        "s",
        SpoolConfig(dir=str(tmp_path), ack="spooled"),
        terminal,
        store,
        meter=Meter("p", CollectorRegistry()),
        clock=clock,
        writer_join=0.05,
    )
    before = set(threading.enumerate())
    spool.start()
    ack = offer_batch(spool, Acks(), [{"i": 1}, {"i": 2}])
    outcome: dict[str, object] = {}

    def drain() -> None:
        outcome["flushed"] = spool.flush(clock.monotonic() + 0.05)
        outcome["abandoned"] = spool.abandon()
        spool.close()

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    try:
        assert store.entered.wait(30)
        # This spool's writer thread (a spool of another test may have the same name).
        writers = [t for t in threading.enumerate() if t.name == "spool-s" and t not in before]
        assert writers
        drainer.join(30)  # a hang-detector bound, not a timing claim
        assert not drainer.is_alive(), "the drain hangs on the hung fsync"
    finally:
        store.let_go.set()
    assert outcome == {"flushed": False, "abandoned": 2}
    assert ack.status is AckStatus.FAILED  # never acknowledged: it was not durable
    assert script.rows == []
    again, _, script2, _ = make(tmp_path)
    for writer in writers:  # the released fsync lets the stuck writer thread finish
        writer.join(30)  # a hang-detector bound, not a timing claim
        assert not writer.is_alive()
    again.start()
    assert again.flush(ManualClock().monotonic() + 1e9)
    assert script2.rows == [{"i": 1}, {"i": 2}]
    assert ack.status is AckStatus.FAILED


def test_b56_b9_a_replay_cuts_a_spooled_batch_as_its_first_write_did_whatever_the_queue(
    tmp_path: Path,
) -> None:
    """The first run hands a spooled batch on while a shard's queue is still full of the
    previous batch's rows: the pool refuses mid-batch and a checkpoint tick comes before
    the rest. The replay (the previous batch was delivered, this one's release note was
    lost) meets empty queues. Both cut the batch's rows into the same pool batches under
    the same dedup tokens, so a terminal that deduplicates by token drops the rows that
    had landed (B56, B9)."""
    from spate.sink import BatchConfig, InflightConfig

    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    pool_config = PoolConfig(
        batch=BatchConfig(max_rows=2), inflight=InflightConfig(max_per_shard=1)
    )
    spool, endpoints, _clock = spool_over_pool(first_dir, "run1", 6, pool_config)
    pool = spool.next
    keys: dict[int, list[bytes]] = {0: [], 1: []}
    for n in itertools.count():
        key = b"k%d" % n
        keys[pool.shard_of(key, LANE)].append(key)  # type: ignore[attr-defined]
        if min(map(len, keys.values())) >= 6:
            break
    # The previous batch: six rows of shard 0. This one: shard 1, then shard 0 (refused
    # while shard 0's queue holds the previous batch's last rows), then 0, 1, 0, 1.
    previous = [({"b": 0, "i": i}, keys[0][i]) for i in range(6)]
    shard_of_row = [1, 0, 0, 1, 0, 1]
    taken = {0: 0, 1: 0}
    batch = []
    for i, shard in enumerate(shard_of_row):
        batch.append(({"b": 1, "i": i}, keys[shard][taken[shard]]))
        taken[shard] += 1
    spool.start()
    ack = Acks().new()
    for row, key in [*previous, *batch]:
        assert spool.offer(row, key, LANE, ack) is Offer.ACCEPTED
    ack.release()
    for _ in range(50):
        spool.tick()
        if len(endpoints.rows()) == 12:
            break
    assert len(endpoints.rows()) == 12
    first = {a.token: a.rows for a in endpoints.attempts}
    # The crash: the segment as written, with the note of the previous batch only.
    second_dir.mkdir()
    (segment,) = [n for n in os.listdir(first_dir) if n.endswith(".jsonl")]
    shutil.copy(first_dir / segment, second_dir / segment)
    (second_dir / segment.replace(".jsonl", ".released")).write_bytes(
        b"%d\n" % len(b"spate-spool 3\n")
    )
    (replayed_ref,) = [b.ref for b in recovered(second_dir)]
    again, endpoints2, clock2 = spool_over_pool(second_dir, "run2", 6, pool_config)
    again.start()
    assert again.flush(clock2.monotonic() + 60)
    replayed = {a.token: a.rows for a in endpoints2.attempts}
    assert sorted(r["i"] for r in endpoints2.rows()) == list(range(6))  # type: ignore[index]
    expected = {t: rows for t, rows in first.items() if replayed_ref.identity in t}
    assert replayed == expected


# -- one owner per spool directory; worker processes (B114) ---------------------------------


def test_b114_a_spool_directory_has_one_owner_at_a_time(tmp_path: Path) -> None:
    """A second store on a directory in use — in this process or another — fails at
    start naming the directory, before it reads, cuts or deletes anything; the lock
    goes with its owner (a close here, the process's death there)."""
    from spate import SinkError

    first = JsonlStore(str(tmp_path))
    first.recover()
    first.append([b'{"a":1}'])
    first.sync()
    with pytest.raises(SinkError, match=f"spool directory {tmp_path} is in use"):
        JsonlStore(str(tmp_path)).recover()
    first.close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from spate.sink import JsonlStore; "
            f"JsonlStore({str(tmp_path)!r}).recover(); print('held', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(SinkError, match="in use by another running spool"):
            JsonlStore(str(tmp_path)).recover()
    finally:
        holder.kill()
        holder.communicate()
    assert [s.records for s in recovered(tmp_path)] == [[b'{"a":1}']]


def test_b114_workers_spool_apart_and_adopt_what_no_worker_of_the_layout_reads(
    tmp_path: Path,
) -> None:
    """Worker ``i`` spools in ``<dir>/w<i>``. Segments no worker of the current layout
    reads — in ``<dir>`` itself (a single-process run) or in ``w<j>`` past the worker
    count — are adopted by one worker each, unless a live spool holds them; a single
    process adopts every ``w<j>``."""
    from spate.sink.tiers._store import adopted_directories, worker_directory

    def spooled(directory: str, record: bytes) -> None:
        store = JsonlStore(directory)
        store.recover()
        store.append([record])
        store.sync()
        store.close()

    root = str(tmp_path)
    assert worker_directory(root, None) == root
    assert worker_directory(root, (1, 2)) == os.path.join(root, "w1")
    spooled(root, b"single")
    for j in range(4):
        spooled(os.path.join(root, f"w{j}"), b"w%d" % j)
    assert adopted_directories(root, (0, 2)) == [root, os.path.join(root, "w2")]
    assert adopted_directories(root, (1, 2)) == [os.path.join(root, "w3")]
    live = JsonlStore(os.path.join(root, "w3"))
    live.recover()  # w3 is still held by a running spool: left to it
    worker1 = JsonlStore(worker_directory(root, (1, 2)), adopt=adopted_directories(root, (1, 2)))
    assert [s.records for s in worker1.recover()] == [[b"w1"]]
    worker1.close()
    live.close()
    worker0 = JsonlStore(worker_directory(root, (0, 2)), adopt=adopted_directories(root, (0, 2)))
    found = sorted(r for s in worker0.recover() for r in s.records)
    worker0.close()
    assert found == [b"single", b"w0", b"w2"]
    assert not [n for n in os.listdir(root) if n.startswith("seg-")]
    single = JsonlStore(root, adopt=adopted_directories(root, None))
    found = sorted(r for s in single.recover() for r in s.records)
    single.close()
    assert found == [b"single", b"w0", b"w1", b"w2", b"w3"]


def test_b114_an_adopted_batch_is_released_apart_from_the_adopters_own(tmp_path: Path) -> None:
    """Every run numbers its segments from 1, so an adopted segment and the adopter's own
    share a number, and their first batches a position: releasing one directory's batch
    releases that batch alone. The other is still replayed after a restart, and releasing
    it later is no error (found by the custody model: a worker count changed from 3 to
    1 under ``ack: spooled``; the batch of the wrong segment was noted released)."""
    from spate.sink.tiers._store import adopted_directories, worker_directory

    root = str(tmp_path)
    for j, nonce in ((0, "aaaa"), (1, "zzzz")):  # the adopted segment sorts last
        store = JsonlStore(os.path.join(root, f"w{j}"), nonce=nonce)
        store.recover()
        store.append([b"w%d" % j])
        store.sync()
        store.close()
    worker = JsonlStore(worker_directory(root, (0, 1)), adopt=adopted_directories(root, (0, 1)))
    refs = {s.records[0]: s.ref for s in worker.recover()}
    assert sorted(refs) == [b"w0", b"w1"]
    assert refs[b"w0"].segment == refs[b"w1"].segment
    worker.release(refs[b"w0"])
    worker.close()
    again = JsonlStore(worker_directory(root, (0, 1)))
    found = again.recover()
    assert [s.records for s in found] == [[b"w1"]]
    again.release(found[0].ref)
    again.close()
    assert not JsonlStore(worker_directory(root, (0, 1))).recover()
