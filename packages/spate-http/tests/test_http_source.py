"""The http_poll source against a local readings API on loopback (B74, B75, B76, B77).

Driven the way the runtime drives a source (start, poll, commit, close); the API is a
real HTTP server in a thread whose answers overlap from one poll to the next.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from spate.config import decode
from spate.errors import ConfigError, ErrorClass, SourceError
from spate.metrics import names
from spate.plugins import BuildContext
from spate.testing.conformance import conformance_context
from spate.testing.conformance._source import RecordingEvents
from spate_http import Checkpoint, HttpPollConfig, HttpPollSource, HttpPollSourceFactory
from spate_http._fetch import retry_after
from spate_http.config import parse_window

from tests.support.api_server import ApiServer, Readings, Reply, reading

KEY = ["station_id", "timestamp"]


def build(url: str, **body: Any) -> tuple[HttpPollSource, BuildContext]:
    raw = {"url": f"{url}/readings", "records": "data.items", "interval": "10ms", **body}
    config = decode(HttpPollConfig, raw, "source.http_poll")
    context = conformance_context("source")
    return HttpPollSourceFactory.build(config, context), context


def run(source: HttpPollSource, *, commit: bool = True, patience: float = 30.0) -> list[Any]:
    """Poll until drained, committing each batch (sync) unless ``commit`` is False."""
    events = RecordingEvents()
    source.start(events)
    out: list[Any] = []
    try:
        for _ in range(int(patience / 0.05)):
            for batch in source.poll(0.05):
                out.extend(json.loads(bytes(p)) for p in batch.payloads)
                if commit:
                    source.commit({batch.lane: batch.next_offset}, sync=True)
            if events.drained_calls:
                break
        else:
            raise AssertionError(f"not drained within {patience}s")
    finally:
        source.close()
    return out


def counts(context: BuildContext, family: Any, by: str) -> Mapping[str, float]:
    return context.meter.totals(family, by)


def test_b74_overlapping_readings_are_each_delivered_once() -> None:
    app = Readings(overlap=5, step=2)
    with ApiServer(app) as server:
        source, context = build(server.url, key=KEY, max_ticks=10)
        got = run(source)
    assert got == [reading(n) for n in range(20)]
    repeats = len(app.served) - 20
    assert repeats > 0
    assert counts(context, names.SOURCE_DROPPED, "reason") == {"duplicate": repeats}


def test_b74_without_a_key_every_reading_of_every_poll_is_handed_out() -> None:
    app = Readings(overlap=5, step=2)
    with ApiServer(app) as server:
        source, _ = build(server.url, max_ticks=3)
        got = run(source)
    assert got == [reading(n) for n in app.served]


def test_b74_a_key_comes_back_once_its_window_of_ticks_passed() -> None:
    app = Readings(overlap=2, step=2, limit=2)  # every poll answers readings 0 and 1
    with ApiServer(app) as server:
        source, context = build(server.url, key=KEY, dedupe_window="2", max_ticks=5)
        got = run(source)
    # Delivered at ticks 1, 3 and 5; dropped at ticks 2 and 4.
    assert got == [reading(0), reading(1)] * 3
    assert counts(context, names.SOURCE_DROPPED, "reason") == {"duplicate": 4}


def test_b74_a_key_window_by_duration_counts_from_the_delivery(tmp_path: Path) -> None:
    checkpoint = Checkpoint("", parse_window("10s"))
    offset = checkpoint.handed_out("k", tick=1, now=100.0)
    assert checkpoint.is_duplicate("k", tick=50, now=1_000.0)  # in flight: always
    checkpoint.commit(offset + 1, now=101.0)
    assert checkpoint.is_duplicate("k", tick=2, now=109.9)
    assert not checkpoint.is_duplicate("k", tick=2, now=110.0)
    checkpoint.commit(offset + 1, now=200.0)  # nothing new: no pruning needed
    checkpoint.handed_out("j", tick=3, now=200.0)
    checkpoint.commit(offset + 2, now=200.0)
    assert set(checkpoint.seen) == {"j"}  # expired keys leave the state


def test_b74_collector_and_key_functions_replace_the_path_and_fields() -> None:
    app = Readings(overlap=4, step=2)
    with ApiServer(app) as server:
        source, context = build(
            server.url,
            records="",
            collector="tests.support.api_server:collect_items",
            key="tests.support.api_server:reading_key",
            max_ticks=3,
        )
        got = run(source)
    assert got == [{**reading(n), "via": "collector"} for n in range(6)]
    assert counts(context, names.SOURCE_DROPPED, "reason")["duplicate"] == len(app.served) - 6


def test_b74_a_collector_that_does_not_import_is_refused_at_build() -> None:
    config = decode(
        HttpPollConfig,
        {"url": "http://127.0.0.1:1/", "collector": "no_such_module_here:f"},
        "source.http_poll",
    )
    with pytest.raises(ConfigError) as caught:
        HttpPollSourceFactory.build(config, conformance_context("source"))
    assert caught.value.path == "source.http_poll.collector"


@pytest.mark.parametrize(
    "pagination",
    [{"next_link": "links.next"}, {"cursor": "meta.next_cursor", "cursor_param": "page"}],
)
def test_b74_pages_are_followed_within_one_tick(pagination: dict[str, str]) -> None:
    app = Readings(overlap=9, step=9, page_size=2)
    with ApiServer(app) as server:
        source, _ = build(server.url, key=KEY, max_ticks=2, pagination=pagination)
        got = run(source)
        requests = len(server.requests)
    assert got == [reading(n) for n in range(18)]
    assert requests == 10  # five pages per tick


def test_b75_429_is_retried_after_the_retry_after_it_names(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Readings(overlap=3, step=3)
    app.fail_next(Reply(429, b"slow down", {"Retry-After": "1"}))
    caplog.set_level(logging.INFO, logger="spate_http")
    with ApiServer(app) as server:
        source, context = build(server.url, key=KEY, max_ticks=1, retry={"backoff": "10ms"})
        got = run(source)
    assert got == [reading(n) for n in range(3)]
    assert "HTTP 429, retrying in 1.00s" in caplog.text
    assert counts(context, names.SOURCE_REQUESTS, "outcome") == {"ok": 1, "retried": 1}


def test_b75_retry_after_is_read_as_seconds_or_a_date_and_capped() -> None:
    import httpx

    def answer(value: str) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": value})

    assert retry_after(answer("7"), now=0.0) == 7.0
    assert retry_after(answer("Thu, 01 Jan 1970 00:01:40 GMT"), now=40.0) == 60.0
    assert retry_after(answer("whenever"), now=0.0) == 0.0
    app = Readings(overlap=1, step=1)
    app.fail_next(Reply(503, headers={"Retry-After": "3600"}))
    with ApiServer(app) as server:
        source, context = build(
            server.url, max_ticks=1, retry={"backoff": "10ms", "max_backoff": "50ms"}
        )
        assert run(source) == [reading(0)]  # an hour asked, 50ms waited
    assert counts(context, names.SOURCE_REQUESTS, "outcome") == {"ok": 1, "retried": 1}


def test_b75_a_503_spell_is_retried_and_one_past_the_attempts_waits_for_the_next_tick() -> None:
    app = Readings(overlap=2, step=2)
    app.fail_next(*[Reply(503)] * 5)
    with ApiServer(app) as server:
        source, context = build(
            server.url, key=KEY, max_ticks=3, retry={"max_attempts": 3, "backoff": "10ms"}
        )
        got = run(source)
    # Tick 1: three 503s, given up. Tick 2: two 503s, then an answer. Tick 3: an answer.
    assert got == [reading(n) for n in range(4)]
    assert counts(context, names.SOURCE_REQUESTS, "outcome") == {
        "ok": 2,
        "retried": 4,
        "failed": 1,
    }


def test_b75_a_timeout_is_counted_and_the_next_tick_tries_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Readings(overlap=2, step=2)
    app.fail_next(Reply(200, b"{}", delay=2.0))
    with ApiServer(app) as server:
        source, context = build(server.url, key=KEY, max_ticks=2, timeout="200ms")
        got = run(source)
    assert got == [reading(0), reading(1)]
    assert counts(context, names.SOURCE_REQUESTS, "outcome") == {"ok": 1, "failed": 1}
    assert "timed out" in caplog.text


def test_b75_a_4xx_is_counted_and_not_retried_within_the_tick() -> None:
    app = Readings(overlap=2, step=2)
    app.fail_next(Reply(404, b"no"))
    with ApiServer(app) as server:
        source, context = build(server.url, key=KEY, max_ticks=2)
        got = run(source)
    assert got == [reading(0), reading(1)]
    assert counts(context, names.SOURCE_REQUESTS, "outcome") == {"ok": 1, "failed": 1}


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(200, b'{"data": {"items": [1, 2'), "not_json"),
        (Reply.json({"error": "maintenance"}), "no_records"),
        (Reply.json({"data": {"items": {"not": "a list"}}}), "no_records"),
    ],
)
def test_b75_a_response_without_records_is_a_skipped_record_error(
    reply: Reply, reason: str
) -> None:
    app = Readings(overlap=2, step=2)
    app.fail_next(reply)
    with ApiServer(app) as server:
        source, context = build(server.url, key=KEY, max_ticks=2)
        got = run(source)
    assert got == [reading(0), reading(1)]
    assert counts(context, names.SOURCE_DROPPED, "reason") == {reason: 1}


def test_b75_a_record_without_its_key_is_a_record_error() -> None:
    def app(request: Any) -> Reply:
        return Reply.json({"data": {"items": [reading(0), {"value": 1}, reading(1)]}})

    with ApiServer(app) as server:
        source, context = build(server.url, key=KEY, max_ticks=1)
        got = run(source)
    assert got == [reading(0), reading(1)]
    assert counts(context, names.SOURCE_DROPPED, "reason") == {"no_key": 1}


def test_b75_under_on_error_fail_a_malformed_response_fails_the_source() -> None:
    app = Readings(overlap=2, step=2)
    app.fail_next(Reply(200, b"<html>oops</html>"))
    with ApiServer(app) as server:
        source, _ = build(server.url, key=KEY, max_ticks=2, on_error="fail")
        with pytest.raises(SourceError) as caught:
            run(source)
    assert caught.value.error_class is ErrorClass.FATAL
    assert "not_json" in caught.value.reason


def test_b75_header_values_reach_the_api_and_never_the_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = "Bearer s3cr3t-t0ken-value"
    app = Readings(overlap=1, step=1)
    app.fail_next(Reply(401, b"who are you"))
    caplog.set_level(logging.DEBUG)
    with ApiServer(app) as server:
        source, _ = build(
            server.url,
            max_ticks=2,
            headers={"Authorization": token, "X-Station-Group": "north-secret-group"},
        )
        assert "s3cr3t" not in repr(source._cfg)
        run(source)
        sent = [r.headers.get("Authorization") for r in server.requests]
    assert sent == [token, token]
    assert "s3cr3t" not in caplog.text
    assert "north-secret-group" not in caplog.text


def test_b76_a_restart_repeats_nothing_committed_and_loses_nothing_uncommitted(
    tmp_path: Path,
) -> None:
    state = str(tmp_path / "state.json")
    app = Readings(overlap=4, step=2, page_size=2)
    with ApiServer(app) as server:
        pagination = {"next_link": "links.next"}
        first, _ = build(server.url, key=KEY, max_ticks=3, state_path=state, pagination=pagination)
        delivered = run(first)  # readings 0..5, all committed
        assert delivered == [reading(n) for n in range(6)]
        second, _ = build(server.url, key=KEY, max_ticks=1, state_path=state, pagination=pagination)
        handed = run(second, commit=False)  # readings 6, 7 handed out, never committed
        assert handed == [reading(6), reading(7)]
        third, _ = build(server.url, key=KEY, max_ticks=1, state_path=state, pagination=pagination)
        again = run(third)  # the API now answers 6..9: 6, 7 again (never acked), 8, 9
    assert again == [reading(n) for n in range(6, 10)]
    saved = json.loads(Path(state).read_text())
    assert saved["next_offset"] == 10
    assert saved["tick"] == 4  # the uncommitted run saved nothing


def test_b76_the_checkpoint_advances_only_to_the_committed_offset(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    checkpoint = Checkpoint(str(state), parse_window("5"))
    for key in ("a", "b", "c"):
        checkpoint.handed_out(key, tick=1, now=0.0)
    checkpoint.commit(2, now=0.0)
    saved = json.loads(state.read_text())
    assert saved["next_offset"] == 2
    assert set(saved["seen"]) == {"a", "b"}
    reloaded = Checkpoint(str(state), parse_window("5"))
    reloaded.load()
    assert (reloaded.next_offset, reloaded.tick) == (2, 0)
    assert not reloaded.is_duplicate("c", tick=1, now=0.0)
    assert reloaded.is_duplicate("a", tick=1, now=0.0)
    assert not list(tmp_path.glob(".*.tmp"))  # written through a renamed temporary


def test_b76_an_unreadable_state_file_fails_start_up(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"version": 1, "next_off')
    with ApiServer(Readings()) as server:
        source, _ = build(server.url, state_path=str(state))
        with pytest.raises(SourceError) as caught:
            source.start(RecordingEvents())
    assert caught.value.error_class is ErrorClass.FATAL
    assert "state.json" in caught.value.reason


def test_b77_a_state_file_is_owned_by_one_running_source(tmp_path: Path) -> None:
    state = str(tmp_path / "state.json")
    with ApiServer(Readings()) as server:
        first, _ = build(server.url, state_path=state)
        second, _ = build(server.url, state_path=state)
        first.start(RecordingEvents())
        try:
            with pytest.raises(SourceError) as caught:
                second.start(RecordingEvents())
            assert caught.value.error_class is ErrorClass.FATAL
            assert "in use by another running source" in caught.value.reason
        finally:
            first.close()
        second.start(RecordingEvents())  # free again once the first one closed
        second.close()


def test_b131_query_values_reach_the_api_and_never_the_logs_errors_or_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An API key inline in ``url``, a value in ``params`` whose name does not look
    secret, and the cursors of later pages: none in any record of spate or httpx, in the
    give-up lines or the metrics; a parameter marked public stays readable."""
    from prometheus_client import generate_latest

    key, city = "K3yZx81qAppId", "HamburgAltona"
    app = Readings(overlap=4, step=4, page_size=2)
    app.fail_next(Reply(404, b"no"))
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="httpx")  # the command quiets it below debug
    with ApiServer(app) as server:
        source, context = build(
            f"{server.url}/readings?appid={key}&units=metric#",
            max_ticks=2,
            params={"q": city, "lang": "de"},
            public_params=["units"],
            pagination={"cursor": "meta.next_cursor", "cursor_param": "page"},
        )
        got = run(source)
        sent = server.requests
    assert len(got) == 4  # the first tick gave up on the 404
    assert all(r.query.get("appid") == key and r.query.get("q") == city for r in sent), [
        r.query for r in sent
    ]
    cursors = [r.query["page"] for r in sent if "page" in r.query]
    assert cursors, "no later page was requested"
    messages = [r.getMessage() for r in caplog.records]
    httpx_lines = [m for r, m in zip(caplog.records, messages, strict=True) if r.name == "httpx"]
    assert httpx_lines, "httpx logged no request line"
    assert any("polling" in m and "units=metric" in m for m in messages), messages
    assert any("HTTP 404" in m for m in messages)
    metrics = generate_latest(context.meter.registry).decode()
    for secret in (key, city, "lang=de", *cursors):
        for message in messages:
            assert secret not in message, message
        assert secret not in metrics
    with pytest.raises(ConfigError) as caught:
        decode(HttpPollConfig, {"url": f"ftp://h/x?appid={key}"}, "source.http_poll")
    assert key not in str(caught.value)
