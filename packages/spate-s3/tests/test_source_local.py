"""The source over a local directory (``file://``) on an in-memory coordination store:
whole runs, exact resume, changed files, retries and quarantine (B24, B25)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from spate.errors import ErrorClass, SourceError
from spate_s3 import ObjectInfo, S3SourceConfig
from spate_s3._objects import LocalObjectStore

from tests.s3.s3kit import Driver, coordination, make_source, record_line, run_to_end


def write_objects(root: Path, layout: list[tuple[str, int]]) -> list[bytes]:
    """Objects ``obj-<i>`` with ``n`` records each, ``gzip`` or plain; all lines in order."""
    root.mkdir(parents=True, exist_ok=True)
    every: list[bytes] = []
    for i, (codec, n) in enumerate(layout):
        lines = [record_line(i, r) for r in range(n)]
        body = b"".join(line + b"\n" for line in lines)
        name = root / f"obj-{i}.ndjson"
        if codec == "gzip":
            name.with_suffix(".gz").write_bytes(gzip.compress(body))
        else:
            name.write_bytes(body)
        every.extend(lines)
    return every


def config(root: Path, **extra: object) -> S3SourceConfig:
    return S3SourceConfig(url=f"file://{root}", **extra)  # type: ignore[arg-type]


def test_a_directory_backfill_delivers_every_record_once_and_completes(tmp_path: Path) -> None:
    expected = write_objects(tmp_path / "d", [("none", 300), ("gzip", 200), ("none", 0)] * 3)
    source, _ = make_source(config(tmp_path / "d", split_target_bytes=20_000, batch_records=64))
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert sorted(r.encode() for r in rows) == sorted(expected)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("stop_after", "within", "seeks"),
    [(120, (120, 300), True), (340, (340, 500), False)],
    ids=["inside-a-plain-object", "inside-a-gzip-object"],
)
def test_b25_resume_skips_exactly_the_committed_records(
    tmp_path: Path, stop_after: int, within: tuple[int, int], seeks: bool
) -> None:
    expected = write_objects(tmp_path / "d", [("none", 300), ("gzip", 200), ("none", 100)])
    cfg = config(tmp_path / "d", batch_records=40, split_target_bytes=1 << 30)
    coord = coordination()
    first, store = make_source(cfg, coord=coord)
    driver = Driver(first)
    first.start(driver)
    try:
        driver.run(until=stop_after + 80, commit=False)
        (lane,) = driver.by_lane
        # Deliver (commit) only up to the first batch end past ``stop_after``; the rest
        # was handed out but never acknowledged.
        stop_after = min(end for end in driver.batch_ends if end >= stop_after)
        assert within[0] <= stop_after < within[1]
        first.commit({lane: stop_after}, sync=True)  # type: ignore[dict-item]
    finally:
        first.close()
    second, _ = make_source(cfg, store, coordination(coord.job))
    again = Driver(second)
    second.start(again)
    try:
        again.poll()
        while not again.records:
            again.poll()
        (split,) = second._splits.values()
        assert (split.reader.start.byte or 0) > 0 if seeks else split.reader.start.byte is None
        again.run()
    finally:
        second.close()
    assert again.records == expected[stop_after:]


def test_b25_a_file_changed_under_its_split_fails_the_split_with_a_clear_error(
    tmp_path: Path,
) -> None:
    root = tmp_path / "d"
    expected = write_objects(root, [("none", 40_000)])
    cfg = config(root, batch_records=500, prefetch_bytes=65536)
    source, _ = make_source(cfg)
    driver = Driver(source)
    source.start(driver)
    try:
        driver.run(until=500)
        target = root / "obj-0.ndjson"
        target.write_bytes(b'{"id":"new"}\n' * 40_000)
        os.utime(target, ns=(1, 1))
        with pytest.raises(SourceError) as info:
            driver.run()
    finally:
        source.close()
    assert info.value.error_class is ErrorClass.FATAL
    message = str(info.value)
    assert "quarantined" in message and "obj-0.ndjson" in message and "changed" in message
    # What was handed out is a prefix of the old version: never a mix of both.
    assert driver.records == expected[: len(driver.records)]
    assert 500 <= len(driver.records) < len(expected)


class FlakyStore(LocalObjectStore):
    """The local store with injected transient read failures (fault injection)."""

    def __init__(self, config: S3SourceConfig, failures: int, *, every: int = 3) -> None:
        super().__init__(config)
        self.failures = failures
        self.every = every
        self.reads = 0

    async def read(self, obj: ObjectInfo, start: int, end: int) -> bytes:
        self.reads += 1
        if self.reads % self.every == 2 % self.every and self.reads > 1 and self.failures > 0:
            self.failures -= 1
            raise SourceError(f"injected failure at {obj.key}:{start}")
        return await super().read(obj, start, end)


def test_transient_read_failures_are_retried_from_the_last_record_handed_out(
    tmp_path: Path,
) -> None:
    root = tmp_path / "d"
    expected = write_objects(root, [("none", 5000), ("gzip", 3000)])
    cfg = config(root, batch_records=300, prefetch_bytes=65536, retry_backoff=0.05)
    store = FlakyStore(cfg, failures=2)
    source, _ = make_source(cfg)
    source._objects = store
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert store.failures == 0
    assert [r.encode() for r in rows] == expected  # type: ignore[union-attr]


def test_b37_a_split_failing_every_retry_in_a_row_fails_the_run_naming_it_without_quarantine(
    tmp_path: Path,
) -> None:
    import asyncio

    from spate_coordination import SplitStatus, read_split_states

    root = tmp_path / "d"
    write_objects(root, [("none", 5000)])
    cfg = config(root, batch_records=300, prefetch_bytes=65536, retry_backoff=0.01)
    source, store = make_source(cfg)
    source._objects = FlakyStore(cfg, failures=1000, every=1)
    report, rows = run_to_end(source)
    assert report.exit_code == 1
    assert "3 read failure(s) in a row" in report.reason and "injected failure" in report.reason
    assert len(rows) < 5000
    # Transient failures never quarantine: a rerun reads the split from its progress.
    (state,) = asyncio.run(read_split_states(store)).values()
    assert state.status is SplitStatus.PENDING


def test_b25_a_restarted_finished_job_ends_at_once_without_reading(tmp_path: Path) -> None:
    root = tmp_path / "d"
    write_objects(root, [("none", 100)])
    cfg = config(root)
    coord = coordination()
    source, store = make_source(cfg, coord=coord)
    report, rows = run_to_end(source)
    assert report.exit_code == 0 and len(rows) == 100
    again, _ = make_source(cfg, store, coordination(coord.job))
    report, rows = run_to_end(again)
    assert report.exit_code == 0 and rows == []
    assert json.loads(str(report.records_in)) == 0


def test_b24_a_zombie_owner_commits_nothing_once_a_successor_took_the_split(
    tmp_path: Path,
) -> None:
    import asyncio

    from spate_coordination import Keyspace
    from spate_coordination._records import STATE_PREFIX, StateRecord

    root = tmp_path / "d"
    write_objects(root, [("none", 2000)])
    cfg = config(root, batch_records=100)
    source, store = make_source(cfg)
    driver = Driver(source)
    source.start(driver)
    try:
        driver.run(until=300, commit=False)
        (lane,) = driver.by_lane
        key = STATE_PREFIX + lane.stream  # type: ignore[attr-defined]
        entry = asyncio.run(store.get(Keyspace.DURABLE, key))
        assert entry is not None
        state = StateRecord.decode(entry.value)
        # A successor takes the split over: the epoch grows (what acquiring does).
        successor = StateRecord(state.epoch + 1, "successor", False, state.progress)
        assert asyncio.run(
            store.compare_and_set(Keyspace.DURABLE, key, successor.encode(), entry.revision)
        )
        source.commit({lane: driver.batch_ends[-1]}, sync=True)  # type: ignore[dict-item]
        after = asyncio.run(store.get(Keyspace.DURABLE, key))
        assert after is not None and StateRecord.decode(after.value) == successor
        driver.poll()  # the loss is noticed: the lane is revoked and nothing more comes
        assert lane in driver.revoked_lanes
        assert driver.poll() == 0
    finally:
        source.close()
