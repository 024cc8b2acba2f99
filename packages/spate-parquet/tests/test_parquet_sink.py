"""Behaviour of the Parquet sink on real files and on moto S3.

* B50: files are cut by the input alone and named by what they hold, so a replay after a
  crash mid-window writes the same objects with the same bytes, every row once;
* B51: acks resolve only once a file is durable, so the commit never passes a file that
  is not written;
* B52: manifest mode publishes parts through atomic manifest versions; concurrent
  writers never lose a part and a reader never sees a torn manifest; a part that fails
  its audit stays out.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spate._clock import ManualClock
from spate.checkpoint._ack import AckStatus
from spate.config import decode
from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.sink.writebehind import CommitGates
from spate_parquet import (
    LocalStore,
    ManifestStore,
    ParquetSinkConfig,
    Part,
    S3Store,
    Store,
)

from .harness import Feeder, make_sink
from .readback import local_files, manifest_parts, parquet_rows, s3_files

LANES = (Lane("orders", 0), Lane("orders", 1))
SCHEMA = {"id": "int64", "lane": "int32", "name": "string"}


def _rows(lane: Lane, count: int) -> list[dict[str, Any]]:
    return [
        {"id": lane.partition * 1_000_000 + i, "lane": lane.partition, "name": f"n{i % 17}"}
        for i in range(count)
    ]


def _clean_run(body: dict[str, Any], count: int) -> None:
    sink = make_sink(body)
    feeder = Feeder(sink)
    for lane in LANES:
        feeder.feed(lane, _rows(lane, count), 0, [50])
    assert sink.flush(float("inf"))
    sink.close()


def _crashing_run(
    body: dict[str, Any], count: int, crash_at: int, sizes: list[int]
) -> dict[Lane, int]:
    """Offer up to ``crash_at`` rows per lane, let writes finish, then die without a flush."""
    sink = make_sink(body)
    feeder = Feeder(sink)
    for lane in LANES:
        feeder.feed(lane, _rows(lane, count)[:crash_at], 0, sizes)
    # Wait for the sealed files only (a crash loses the open windows).
    deadline = threading.Event()
    for _ in range(600):
        if not sink._jobs and not sink._busy:
            break
        deadline.wait(0.05)
    committed = {lane: feeder.committed(lane) for lane in LANES}
    sink.abandon()  # what kill -9 leaves: open windows never written, their acks not delivered
    sink.close()
    return committed


def _resume(body: dict[str, Any], count: int, committed: dict[Lane, int], sizes: list[int]) -> None:
    sink = make_sink(body)
    feeder = Feeder(sink)
    for lane in LANES:
        feeder.feed(lane, _rows(lane, count), committed[lane], sizes)
    assert sink.flush(float("inf"))
    sink.close()


def _local_body(root: Path, **extra: Any) -> dict[str, Any]:
    return {"path": str(root), "schema": SCHEMA, "max_records": 120, **extra}


@pytest.mark.parametrize("publish", ["files", "manifest"])
def test_b50_replay_after_crashes_writes_the_same_files_and_every_row_once(
    tmp_path: Path, publish: str
) -> None:
    extra = {"publish": publish, "table": "orders"} if publish == "manifest" else {}
    count = 700
    _clean_run(_local_body(tmp_path / "clean", **extra), count)
    body = _local_body(tmp_path / "crashed", **extra)
    # Two crashes at different points, each replayed from its commit with other batch sizes.
    committed = _crashing_run(body, count, 260, [37, 11])
    assert all(0 < c <= 260 for c in committed.values()), committed
    committed = _second_crash(body, count, committed)
    _resume(body, count, committed, [64, 5])

    clean = local_files(tmp_path / "clean")
    crashed = local_files(tmp_path / "crashed")
    data = sorted(k for k in clean if k.endswith(".parquet"))
    assert data == sorted(k for k in crashed if k.endswith(".parquet"))
    assert all(clean[k] == crashed[k] for k in data), "same names, different bytes"
    visible = manifest_parts(crashed, "orders") if publish == "manifest" else data
    rows = parquet_rows(crashed, visible)
    expected = [r for lane in LANES for r in _rows(lane, count)]
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in expected)
    if publish == "manifest":
        assert manifest_parts(clean, "orders") and sorted(
            manifest_parts(clean, "orders")
        ) == sorted(visible)


def _second_crash(body: dict[str, Any], count: int, committed: dict[Lane, int]) -> dict[Lane, int]:
    """Replay from ``committed`` up to row 530, then crash again."""
    sink = make_sink(body)
    feeder = Feeder(sink)
    for lane in LANES:
        feeder.feed(lane, _rows(lane, count)[:530], committed[lane], [23])
    for _ in range(600):
        if not sink._jobs and not sink._busy:
            break
        threading.Event().wait(0.05)
    # A token of the replay covers positions from the old commit; delivered ones advance it.
    again: dict[Lane, int] = {}
    for lane in LANES:
        position = committed[lane]
        for token in feeder.tokens.get(lane, []):
            if token.status is not AckStatus.DELIVERED:
                break
            position = token.next_offset
        again[lane] = position
    sink.abandon()
    sink.close()
    return again


def test_b50_replay_on_s3_writes_the_same_objects(
    bucket: tuple[Any, str], moto_endpoint: str
) -> None:
    client, name = bucket
    s3 = {"endpoint_url": moto_endpoint, "region": "us-east-1"}
    count = 400

    def body(prefix: str) -> dict[str, Any]:
        return {
            "path": f"s3://{name}/{prefix}",
            "schema": SCHEMA,
            "max_records": 90,
            "publish": "manifest",
            "table": "orders",
            "s3": s3,
        }

    _clean_run(body("clean"), count)
    committed = _crashing_run(body("crashed"), count, 200, [33])
    _resume(body("crashed"), count, committed, [7, 41])
    clean = s3_files(client, name, "clean/")
    crashed = s3_files(client, name, "crashed/")
    data = sorted(k for k in clean if k.endswith(".parquet"))
    assert data == sorted(k for k in crashed if k.endswith(".parquet"))
    assert all(clean[k] == crashed[k] for k in data)
    rows = parquet_rows(crashed, manifest_parts(crashed, "orders"))
    assert sorted(r["id"] for r in rows) == sorted(
        r["id"] for lane in LANES for r in _rows(lane, count)
    )


def test_b51_commit_never_passes_a_row_that_is_not_in_a_written_file(tmp_path: Path) -> None:
    sink = make_sink(_local_body(tmp_path, max_records=50))
    feeder = Feeder(sink)
    lane = LANES[0]
    rows = _rows(lane, 410)
    for start in range(0, 410, 13):
        feeder.batch(lane, start, rows[start : start + 13])
        # The commit first, then the files: files only grow, so this order is sound.
        committed = feeder.committed(lane)
        written = {r["id"] for r in parquet_rows(local_files(tmp_path))}
        assert all(r["id"] in written for r in rows[:committed]), committed
    assert feeder.committed(lane) <= 400  # the last window is still open: not committed
    assert sink.flush(float("inf"))
    assert feeder.committed(lane) == 410
    sink.close()


def test_b40_revocation_writes_the_revoked_lane_and_leaves_the_others_open(
    tmp_path: Path,
) -> None:
    """``flush_lanes`` cuts only the revoked lane's window: the other lane's next file
    still ends where its input says (B40, B50), and its rows are not committed early."""
    sink = make_sink(_local_body(tmp_path, max_records=100))
    feeder = Feeder(sink)
    revoked, kept = LANES
    feeder.feed(revoked, _rows(revoked, 30), 0, [10])
    feeder.feed(kept, _rows(kept, 130), 0, [10])
    assert sink.flush_lanes([revoked], float("inf"))
    assert feeder.committed(revoked) == 30
    assert feeder.committed(kept) == 100  # its open window (rows 100-129) stays open
    assert len(local_files(tmp_path)) == 2
    feeder.feed(kept, _rows(kept, 200), 130, [10])
    assert sink.flush(float("inf"))
    assert feeder.committed(kept) == 200
    files = local_files(tmp_path)
    ranges = []
    for path in files:
        ids = [row["id"] for row in parquet_rows(files, [path])]
        ranges.append((ids[0] // 1_000_000, min(ids) % 1_000_000, max(ids) % 1_000_000))
    assert sorted(ranges) == [(0, 0, 29), (1, 0, 99), (1, 100, 199)]
    sink.close()


def _s3_store(bucket: tuple[Any, str], endpoint: str, prefix: str) -> S3Store:
    config = decode(
        ParquetSinkConfig,
        {"path": f"s3://{bucket[1]}/{prefix}", "s3": {"endpoint_url": endpoint}},
        "parquet",
    )
    return S3Store(config)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_b52_two_writers_never_lose_a_part_and_readers_never_see_a_torn_manifest(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    if where == "s3":
        bucket = request.getfixturevalue("bucket")
        store: Store = _s3_store(bucket, request.getfixturevalue("moto_endpoint"), "lake")
        client, name = bucket

        def pointer() -> bytes | None:
            try:
                body: bytes = client.get_object(Bucket=name, Key="lake/t.parts/_manifest.json")[
                    "Body"
                ].read()
            except client.exceptions.NoSuchKey:
                return None
            return body
    else:
        store = LocalStore(str(tmp_path))

        def pointer() -> bytes | None:
            try:
                return (tmp_path / "t.parts" / "_manifest.json").read_bytes()
            except FileNotFoundError:
                return None

    # Two "processes": separate gates, so only the compare-and-set serializes them.
    writers = [
        ManifestStore(store, "t", CommitGates().gate(f"writer-{i}-{tmp_path}", timeout=5.0))
        for i in range(2)
    ]
    per_writer = 40 if where == "local" else 15
    stop = threading.Event()
    seen: list[int] = []
    torn: list[str] = []

    def read() -> None:
        while not stop.is_set():
            data = pointer()
            if data is None:
                continue
            try:
                body = json.loads(data)
            except ValueError as exc:
                torn.append(f"{exc}: {data[:80]!r}")
                continue
            if len(body["parts"]) != body["version"]:
                torn.append(f"version {body['version']} lists {len(body['parts'])} parts")
            seen.append(body["version"])

    def write(i: int) -> None:
        for n in range(per_writer):
            part = Part(f"t.parts/w{i}-{n}.parquet", 1, 10, f"s{i}", 0, n, n, 0)
            writers[i].publish(part, "id: int64")

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    reader.join()
    final = writers[0].latest()
    assert len(final.parts) == 2 * per_writer
    assert {p.path for p in final.parts} == {
        f"t.parts/w{i}-{n}.parquet" for i in range(2) for n in range(per_writer)
    }
    assert not torn, torn[:3]
    assert seen, "the reader never saw a manifest"
    body = json.loads(pointer() or b"{}")
    assert body["version"] == 2 * per_writer, "the pointer does not show the last version"
    if where == "s3":
        # If-Match on the pointer: it never moves backwards.
        assert seen == sorted(seen), "the pointer moved backwards"
    store.close()


def test_b52_moto_enforces_conditional_writes(bucket: tuple[Any, str], moto_endpoint: str) -> None:
    """What the manifest relies on: If-None-Match: * and If-Match on PutObject (moto 5)."""
    store = _s3_store(bucket, moto_endpoint, "cas")
    try:
        assert store.create("k", b"1")
        assert not store.create("k", b"2")
        found = store.get_tagged("k")
        assert found is not None and found[0] == b"1"
        assert not store.replace("k", b"3", '"0123456789abcdef0123456789abcdef"')
        assert store.replace("k", b"4", found[1])
        assert not store.replace("k", b"5", found[1]), "a stale ETag was accepted"
        assert store.get("k") == b"4"
    finally:
        store.close()


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_b52_a_part_failing_its_audit_stays_out_and_the_next_publishes(
    tmp_path: Path, policy: str
) -> None:
    body = _local_body(
        tmp_path,
        publish="manifest",
        table="orders",
        schema={"id": "int64", "name": "string"},
        max_records=10,
        audits={"not_null": ["name"], "on_failure": policy},
    )
    sink = make_sink(body)
    feeder = Feeder(sink)
    lane = LANES[0]
    bad = [{"id": i, "name": None if i == 3 else "x"} for i in range(10)]
    good = [{"id": i, "name": "x"} for i in range(10, 20)]
    first = feeder.batch(lane, 0, bad)
    second = feeder.batch(lane, 10, good)
    assert sink.flush(float("inf"))
    sink.close()
    files = local_files(tmp_path)
    published = manifest_parts(files, "orders")
    assert [r["id"] for r in parquet_rows(files, published)] == list(range(10, 20))
    assert not any("-00000000000000000000-" in k for k in files), "the audited part was written"
    expected = AckStatus.FAILED if policy == "fail" else AckStatus.DELIVERED
    assert first.status is expected
    assert second.status is AckStatus.DELIVERED


def test_b50_a_compression_change_writes_new_paths_and_old_files_stay_valid(
    tmp_path: Path,
) -> None:
    """Files already written keep their codec and name; later positions use the new one."""
    lane = LANES[0]
    rows = _rows(lane, 200)
    sink = make_sink(_local_body(tmp_path, compression="zstd", max_records=40))
    feeder = Feeder(sink)
    feeder.feed(lane, rows[:100], 0, [25])
    for _ in range(600):
        if not sink._jobs and not sink._busy:
            break
        threading.Event().wait(0.05)
    committed = feeder.committed(lane)
    sink.abandon()  # a restart mid-window, with a new codec configured
    sink.close()
    before = local_files(tmp_path)
    assert len(before) == 2 and committed == 75, (sorted(before), committed)

    sink = make_sink(_local_body(tmp_path, compression="snappy", max_records=40))
    Feeder(sink).feed(lane, rows, committed, [25])
    assert sink.flush(float("inf"))
    sink.close()
    after = local_files(tmp_path)
    assert all(after[k] == v for k, v in before.items()), "a written file changed"
    new = sorted(set(after) - set(before))
    assert [k.split("-")[2:4] for k in new] == [
        ["00000000000000000080", "00000000000000000119"],
        ["00000000000000000120", "00000000000000000159"],
        ["00000000000000000160", "00000000000000000199"],
    ]
    for keys, codec in ((sorted(before), "zstd"), (new, "snappy")):
        for key in keys:
            meta = pq.ParquetFile(tmp_path / key).metadata
            assert meta.row_group(0).column(0).compression.lower() == codec
    assert sorted(r["id"] for r in parquet_rows(after)) == [r["id"] for r in rows]


def test_b50_record_time_windows_and_hive_directories_cut_files_by_the_input(
    tmp_path: Path,
) -> None:
    """Files never span two hours of record time; directories name the hour and the column."""
    body = {
        "path": str(tmp_path),
        "schema": {"id": "int64", "country": "string", "ts": "timestamp[ms, tz=UTC]"},
        "partition_by": ["country"],
        "window": "1h",
        "time_column": "ts",
        "time_partitions": "dt=%Y-%m-%d/hour=%H",
        "max_records": 1000,
    }
    base = dt.datetime(2026, 12, 1, 4, 50, tzinfo=dt.UTC)
    rows = [
        {"id": i, "country": "DE" if i % 3 else "FR", "ts": base + dt.timedelta(minutes=i)}
        for i in range(30)
    ]
    sink = make_sink(body)
    feeder = Feeder(sink)
    feeder.feed(LANES[0], rows, 0, [7])
    # The first row of 05:00 closed the 04:00 windows: their acks resolve before any flush.
    for _ in range(1200):
        if feeder.committed(LANES[0]) >= 7:
            break
        threading.Event().wait(0.05)
    assert feeder.committed(LANES[0]) >= 7
    assert sink.flush(float("inf"))
    sink.close()
    files = local_files(tmp_path)
    assert sorted(k.rsplit("/", 1)[0] for k in files) == [
        "dt=2026-12-01/hour=04/country=DE",
        "dt=2026-12-01/hour=04/country=FR",
        "dt=2026-12-01/hour=05/country=DE",
        "dt=2026-12-01/hour=05/country=FR",
    ]
    for key in files:
        table = pq.read_table(tmp_path / key)
        hours = {t.hour for t in table.column("ts").to_pylist()}
        assert len(hours) == 1, key
    assert sorted(r["id"] for r in parquet_rows(files)) == list(range(30))


def test_b52_a_schema_change_opens_a_new_part_and_the_manifest_records_both(
    tmp_path: Path,
) -> None:
    body = {"path": str(tmp_path), "publish": "manifest", "table": "t", "max_records": 100}
    sink = make_sink(body)
    feeder = Feeder(sink)
    feeder.batch(LANES[0], 0, [{"id": i} for i in range(5)])
    feeder.batch(LANES[0], 5, [{"id": i, "extra": f"e{i}"} for i in range(5, 9)])
    assert sink.flush(float("inf"))
    sink.close()
    manifest = json.loads((tmp_path / "t.parts" / "_manifest.json").read_bytes())
    assert [p["rows"] for p in manifest["parts"]] == [5, 4]
    assert [p["source"]["first"] for p in manifest["parts"]] == [0, 5]
    assert manifest["schemas"] == ["id: int64", "id: int64, extra: string"]
    assert [p["schema"] for p in manifest["parts"]] == [0, 1]
    assert manifest["total_rows"] == 9


def test_b51_processing_time_windows_close_on_the_tick_after_they_end(tmp_path: Path) -> None:
    clock = ManualClock(wall_start=1_800_000_000.0)  # a whole hour: 500,000 h
    body = {"path": str(tmp_path), "window": "1h", "window_time": "processing"}
    sink = make_sink(body, clock=clock)
    feeder = Feeder(sink)
    first = feeder.batch(LANES[0], 0, [{"id": i} for i in range(5)])
    sink.tick()
    assert first.status is AckStatus.PENDING  # the hour is not over: nothing is cut
    clock.advance(3600)
    sink.tick()
    for _ in range(1200):
        if first.status is not AckStatus.PENDING:
            break
        threading.Event().wait(0.05)
    assert first.status is AckStatus.DELIVERED
    assert [r["id"] for r in parquet_rows(local_files(tmp_path))] == list(range(5))
    sink.close()


def test_b52_a_stalled_gate_holder_does_not_stop_publishing(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    gates = CommitGates()
    gate = gates.gate(f"stalled-{tmp_path}", timeout=0.2)
    stalled = gates.gate(f"stalled-{tmp_path}", timeout=0.2)
    release = threading.Event()
    held = threading.Event()

    def hold() -> Any:
        held.set()
        release.wait(60)
        return None

    holder = threading.Thread(target=stalled.run, args=(hold,))
    holder.start()
    held.wait(60)
    try:
        manifest = ManifestStore(store, "t", gate).publish(
            Part("t.parts/p.parquet", 1, 1, "s", 0, 0, 0, 0), "id: int64"
        )
    finally:
        release.set()
        holder.join()
    assert manifest.version == 1 and manifest.paths == {"t.parts/p.parquet"}


@pytest.mark.parametrize("declared", [False, True])
def test_b50_a_filtering_chain_loses_nothing_on_replay(tmp_path: Path, declared: bool) -> None:
    """Fewer rows than records per batch: positions are not offsets. With two directories
    one fills files while the other holds the commit back; a replay with other batch
    boundaries must still not skip a row that was never written — whether the sink is
    told (``one_row_per_record: false``) or finds out from the first batch."""
    lane = LANES[0]
    records = list(range(900))
    kept = [r for r in records if r % 3 == 0]  # the chain drops two records of three

    def row(r: int) -> dict[str, Any]:
        return {"id": r, "g": "rare" if r % 99 == 0 else "common"}

    def feed(feeder: Feeder, start: int, stop: int, size: int) -> None:
        for first in range(start, stop, size):
            end = min(first + size, stop)
            kept_rows = [row(r) for r in records[first:end] if r % 3 == 0]
            feeder.batch(lane, first, kept_rows, records=end - first)

    body = {
        "path": str(tmp_path),
        "partition_by": ["g"],
        "max_records": 40,
        "one_row_per_record": not declared,
    }
    sink = make_sink(body)
    feeder = Feeder(sink)
    feed(feeder, 0, 700, 37)
    for _ in range(600):
        if not sink._jobs and not sink._busy:
            break
        threading.Event().wait(0.05)
    committed = feeder.committed(lane)
    sink.abandon()
    sink.close()
    assert committed < 600 and local_files(tmp_path), committed
    sink = make_sink(body)
    feed(Feeder(sink), committed, 900, 160)
    assert sink.flush(float("inf"))
    sink.close()
    got = Counter(r["id"] for r in parquet_rows(local_files(tmp_path)))
    assert set(got) == set(kept), sorted(set(kept) - set(got))[:10]


@pytest.mark.parametrize("orphans", ["keep", "delete"])
def test_b52_unpublished_parts_are_kept_for_adoption_or_deleted_at_start(
    tmp_path: Path, orphans: str
) -> None:
    body = {"path": str(tmp_path), "publish": "manifest", "table": "t", "max_records": 5}
    sink = make_sink(body)
    Feeder(sink).batch(LANES[0], 0, [{"id": i} for i in range(5)])
    assert sink.flush(float("inf"))
    sink.close()
    stray = (
        tmp_path
        / "t.parts"
        / "orders-0-00000000000000000005-00000000000000000009-0123456789abcdef.parquet"
    )
    pq.write_table(pa.table({"id": [5]}), stray)  # written, never published
    sink = make_sink({**body, "orphans": orphans})
    sink.close()
    assert stray.exists() is (orphans == "keep")
    published = manifest_parts(local_files(tmp_path), "t")
    assert len(published) == 1 and stray.name not in published[0]


def test_b52_an_empty_flush_changes_no_manifest(tmp_path: Path) -> None:
    body = {"path": str(tmp_path), "publish": "manifest", "table": "t", "max_records": 5}
    sink = make_sink(body)
    Feeder(sink).batch(LANES[0], 0, [{"id": i} for i in range(3)])
    assert sink.flush(float("inf"))
    before = local_files(tmp_path)
    assert sink.flush(float("inf"))  # nothing new: no part, no version
    sink.tick()
    sink.close()
    assert local_files(tmp_path) == before
    assert json.loads(before["t.parts/_manifest.json"])["version"] == 1


@pytest.mark.parametrize("breaker", [True, False], ids=["breaker", "no-breaker"])
def test_b156_an_open_breaker_holds_the_next_write_until_it_half_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breaker: bool
) -> None:
    """Two failed writes (a 503 each) open a breaker of threshold 2: the third waits its
    ``open_for`` on the pipeline clock. Inline on a ManualClock, so the wait is exact."""
    original = LocalStore.put
    failures: list[str] = []

    def put(self: LocalStore, key: str, data: bytes) -> None:
        if len(failures) < 2:
            failures.append(key)
            raise SinkError(f"PUT {key}: 503 SlowDown", ErrorClass.RETRYABLE)
        original(self, key, data)

    monkeypatch.setattr(LocalStore, "put", put)
    clock = ManualClock()
    body: dict[str, Any] = {"path": str(tmp_path), "retry": {"initial": "10ms", "max": "50ms"}}
    if breaker:
        body["breaker"] = {"failure_threshold": 2, "open_for": "10m"}
    sink = make_sink(body, clock=clock, io_threads=0)
    try:
        token = Feeder(sink).batch(LANES[0], 0, [{"id": i} for i in range(3)])
        started = clock.monotonic()
        assert sink.flush(started + 3600)
    finally:
        sink.close()
    assert len(failures) == 2 and token.status is AckStatus.DELIVERED
    assert [r["id"] for r in parquet_rows(local_files(tmp_path))] == [0, 1, 2]
    waited = clock.monotonic() - started
    if breaker:
        assert 600.0 <= waited <= 600.0 + 0.05  # open_for, plus the first retry's backoff
    else:
        assert waited <= 0.1  # two backoffs of at most 10ms and 20ms
