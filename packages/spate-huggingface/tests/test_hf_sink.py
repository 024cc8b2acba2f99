"""The sink against the Hub test server (the documented commit API on loopback).

One commit per window with Hive partition paths and content-hashed names (B78);
retries of 5xx, 429 (Retry-After) and stalled requests, and acks that fail when the
attempts run out (B79); the token in no log line or error (B67); the commit gate keeps
two pipelines on one repository from committing at once (B80).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

import httpx
import pytest
from spate import AckStatus, ManualClock
from spate.errors import SinkError
from spate.sink.writebehind import CommitGates
from spate_huggingface import HubError

from tests.support.hub import HubServer, parse_commit

from .harness import REPO, TOKEN, Feeder, body, make_sink, parquet_rows

HOUR = 3600.0


def _readings(count: int, start: int = 0) -> list[dict[str, object]]:
    return [{"station": f"s{i % 2}", "seq": start + i, "value": i * 0.5} for i in range(count)]


def test_b78_one_commit_per_window_with_hive_paths_and_every_row_once(hub: HubServer) -> None:
    clock = ManualClock(wall_start=1_796_084_400.0)  # 2026-12-01T00:20:00Z
    template = "data/date={start:%Y-%m-%d}/hour={start:%H}/station={station}/part-{hash}.{ext}"
    sink = make_sink(body(hub, path_template=template), clock=clock)
    feeder = Feeder(sink)
    first = _readings(10)
    try:
        feeder.batch(first[:6])
        feeder.batch(first[6:])
        sink.tick()  # the window has not ended: nothing is committed yet (B10 cuts nothing)
        assert hub.commits == [] and all(t.status is AckStatus.PENDING for t in feeder.tokens)
        clock.advance(HOUR)
        second = _readings(4, start=10)
        feeder.batch(second)
        sink.tick()  # the first window ended: one commit, its acks delivered
        assert sink.flush(clock.monotonic() + 30)  # flush deadlines are on the pipeline clock
    finally:
        sink.close()
    assert len(hub.commits) == 2
    assert [t.status for t in feeder.tokens] == [AckStatus.DELIVERED] * 3
    files = hub.files(REPO)
    assert sorted({p.rsplit("/", 1)[0] for p in files}) == [
        "data/date=2026-12-01/hour=00/station=s0",
        "data/date=2026-12-01/hour=00/station=s1",
        "data/date=2026-12-01/hour=01/station=s0",
        "data/date=2026-12-01/hour=01/station=s1",
    ]
    assert all(p.rsplit("/", 1)[1].startswith("part-") for p in files)
    assert sorted(r["seq"] for r in parquet_rows(files)) == list(range(14))
    assert set(hub.commits[0].files) | set(hub.commits[1].files) == set(files)
    summary, _description, decoded = parse_commit(hub.commits[0].body)
    assert summary.startswith("spate: 10 rows") and set(decoded) == set(hub.commits[0].files)


def test_b78_record_time_places_rows_by_their_time_column(hub: HubServer) -> None:
    sink = make_sink(
        body(
            hub,
            window="1d",
            window_time="record",
            time_column="at",
            encoder={"format": "jsonl"},
            path_template="day={start:%Y-%m-%d}/{hash}.{ext}",
        )
    )
    day = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
    rows = [{"id": i, "at": day + dt.timedelta(hours=18 * i)} for i in range(3)]
    try:
        Feeder(sink).batch(rows)
        assert sink.flush(time.monotonic() + 30)
    finally:
        sink.close()
    assert sorted(p.split("/")[0] for p in hub.files(REPO)) == [
        "day=2026-11-30",
        "day=2026-12-01",
        "day=2026-12-02",
    ]


@pytest.mark.parametrize(("status", "retry_after"), [(503, None), (429, "0"), (500, None)])
def test_b79_5xx_and_429_are_retried_until_the_commit_lands(
    hub: HubServer, status: int, retry_after: str | None
) -> None:
    hub.fail_commits(2, status=status, retry_after=retry_after)
    sink = make_sink(body(hub))
    feeder = Feeder(sink)
    try:
        token = feeder.batch(_readings(5))
        assert sink.flush(time.monotonic() + 30)
    finally:
        sink.close()
    assert hub.answers == [status, status, 200]
    assert token.status is AckStatus.DELIVERED
    assert sorted(r["seq"] for r in parquet_rows(hub.files(REPO))) == list(range(5))
    assert sink.commit_retries == 2


def test_b79_retry_after_is_waited_out_before_the_next_attempt() -> None:
    """The backoff here is 10-50ms; a 429 asking for 2s delays the retry by at least that."""
    with HubServer(token=TOKEN) as hub:
        hub.create_repo(REPO)
        hub.fail_commits(1, status=429, retry_after="2")
        sink = make_sink(body(hub))
        try:
            Feeder(sink).batch(_readings(1))
            sink.tick()
            sink.flush(time.monotonic())  # seals and queues; the first attempt gets the 429
            deadline = time.monotonic() + 30
            while hub.attempts < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # far more than the 10-50ms backoff, still inside Retry-After
            assert hub.attempts == 1, "retried before Retry-After passed"
            assert sink.flush(time.monotonic() + 30)
        finally:
            sink.close()
        assert hub.answers == [429, 200]


def test_b79_when_the_attempts_run_out_the_acks_fail_and_nothing_is_committed(
    hub: HubServer,
) -> None:
    hub.fail_commits(10, status=503)
    sink = make_sink(body(hub, retry={"initial": "10ms", "max": "20ms", "max_attempts": 3}))
    feeder = Feeder(sink)
    try:
        token = feeder.batch(_readings(5))
        assert sink.flush(time.monotonic() + 30)
    finally:
        sink.close()
    assert hub.answers == [503, 503, 503]
    assert token.status is AckStatus.FAILED
    assert hub.files(REPO) == {} and sink.windows_failed == 1


def test_b79_a_refused_commit_is_not_retried(hub: HubServer) -> None:
    hub.fail_commits(1, status=403)
    sink = make_sink(body(hub))
    feeder = Feeder(sink)
    try:
        token = feeder.batch(_readings(2))
        assert sink.flush(time.monotonic() + 30)
    finally:
        sink.close()
    assert hub.answers == [403] and token.status is AckStatus.FAILED


def test_b80_a_stalled_commit_times_out_releases_the_gate_and_is_retried(hub: HubServer) -> None:
    hub.stall_commits(1, seconds=2.0)
    gates = CommitGates()
    sink = make_sink(body(hub, request_timeout="500ms"), commit_gates=gates)
    feeder = Feeder(sink)
    try:
        token = feeder.batch(_readings(3))
        assert sink.flush(time.monotonic() + 60)
    finally:
        sink.close()
    # The stalled first attempt timed out and a later one delivered; on a loaded machine
    # the retry itself may outlast the 500 ms too, so more than two attempts are fine.
    assert hub.attempts >= 2 and token.status is AckStatus.DELIVERED
    gate = gates.gate(f"{hub.endpoint}/datasets/{REPO}@main", 0.0)
    assert gate.acquire(0.0), "the gate is still held after the commit"
    gate.release()


def test_b80_two_pipelines_on_one_repository_never_commit_at_once() -> None:
    """Each commit stays in flight 300ms on the server; both sinks flush together. The two
    pipelines share one process's registry of commit gates (B231)."""
    gates = CommitGates()
    with HubServer(token=TOKEN, commit_delay=0.3) as hub:
        hub.create_repo(REPO)
        sinks = [make_sink(body(hub), name=f"pipeline-{i}", commit_gates=gates) for i in range(2)]
        try:
            for i, sink in enumerate(sinks):
                Feeder(sink).batch(_readings(4, start=10 * i))
            done: list[bool] = []
            flushes = [
                threading.Thread(target=lambda s=s: done.append(s.flush(time.monotonic() + 60)))
                for s in sinks
                for _ in range(1)
            ]
            for t in flushes:
                t.start()
            for t in flushes:
                t.join()
        finally:
            for sink in sinks:
                sink.close()
        assert done == [True, True]
        assert len(hub.commits) == 2
        assert hub.max_concurrent == 1
        assert sorted(r["seq"] for r in parquet_rows(hub.files(REPO))) == [
            *range(4),
            *range(10, 14),
        ]


def test_the_test_server_sees_concurrent_commits_without_a_gate() -> None:
    """The overlap detector of the B80 test can fail: two raw commits at once are seen."""
    with HubServer(token=TOKEN, commit_delay=0.5) as hub:
        hub.create_repo(REPO)
        url = f"{hub.endpoint}/api/datasets/{REPO}/commit/main"
        header = b'{"key": "header", "value": {"summary": "x", "description": ""}}\n'

        def post() -> None:
            httpx.post(
                url,
                content=header,
                headers={
                    "Authorization": f"Bearer {TOKEN}",
                    "Content-Type": "application/x-ndjson",
                },
                timeout=30,
            )

        threads = [threading.Thread(target=post) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert hub.max_concurrent == 2


def test_b67_the_token_is_in_no_log_line_or_error(
    hub: HubServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server echoes a wrong token in its 401 answer; the sink's error scrubs it."""
    wrong = "hf_wrong_token_9876543210"
    monkeypatch.setenv("HF_TOKEN", wrong)
    caplog.set_level(logging.DEBUG)
    config = {k: v for k, v in body(hub).items() if k != "token"}
    sink = make_sink(config, start=False)
    try:
        with pytest.raises(HubError) as err:
            sink.start()
    finally:
        sink.close()
    assert err.value.status == 401 and "127.0.0.1" in str(err.value)
    assert wrong not in str(err.value) and wrong not in err.value.reason
    assert wrong not in caplog.text and wrong not in repr(sink.config)


def test_b29_an_unknown_repository_fails_start_naming_it(hub: HubServer) -> None:
    sink = make_sink(body(hub, repo="spate/missing"), start=False)
    try:
        with pytest.raises(SinkError, match="spate/missing"):
            sink.start()
    finally:
        sink.close()


@pytest.mark.parametrize("breaker", [True, False], ids=["breaker", "no-breaker"])
def test_b156_an_open_breaker_holds_the_next_commit_until_it_half_opens(
    hub: HubServer, breaker: bool
) -> None:
    """Two failed commits open a breaker of threshold 2: the third waits its ``open_for``
    on the pipeline clock, not the 10ms backoff. Inline (no io threads) on a ManualClock,
    whose ``sleep`` advances it, so the wait is exact; without a breaker only the backoff
    spaces the attempts."""
    clock = ManualClock()
    hub.fail_commits(2)
    extra = {"breaker": {"failure_threshold": 2, "open_for": "10m"}} if breaker else {}
    sink = make_sink(body(hub, **extra), clock=clock, io_threads=0)
    try:
        token = Feeder(sink).batch(_readings(3))
        started = clock.monotonic()
        assert sink.flush(started + 3 * HOUR)
    finally:
        sink.close()
    assert hub.attempts == 3 and token.status is AckStatus.DELIVERED
    waited = clock.monotonic() - started
    if breaker:
        assert 600.0 <= waited <= 600.0 + 0.05  # open_for, plus the first retry's backoff
    else:
        assert waited <= 0.1  # two backoffs of at most 10ms and 20ms
