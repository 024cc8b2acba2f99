"""``http_poll`` pipelines end to end: a local readings API on loopback → JSON → file sink.

The API answers each poll with the latest readings, overlapping the previous answer
(``tests/support/api_server.py``). The pipelines write to the fsynced file sink, so
what the file holds after a ``kill -9`` is everything any run acknowledged.

* B74, B76: ``spate run`` killed with SIGKILL between ticks and started again delivers
  every reading, repeats nothing whose key the state file held at the kill, and the
  header's secret never reaches the log;
* B75: 429 (with ``Retry-After``), 503, a timeout and a body that is not JSON are
  retried, given up for the tick or skipped, and the pipeline runs on to completion;
* B65, B77: two ``http_poll`` pipelines in one ``spate run`` each deliver their own
  readings once; a second source given the same state file fails at start-up.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from spate import Pipeline
from spate.testing import read_file_sink

from tests.support.api_server import ApiServer, Readings, Reply, reading
from tests.support.cli_run import SpateRun
from tests.support.scale import scaled

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "Bearer readings-t0ken-never-logged"

CONFIG = """
pipeline: {{name: {name}, status_interval: 0s}}
checkpoint: {{interval: 100ms, drain_timeout: 10s}}
admin: {{listen: none}}
source:
  http_poll:
    url: "{url}/readings"
    headers: {{Authorization: "${{READINGS_TOKEN}}"}}
    records: data.items
    key: [station_id, timestamp]
    interval: {interval}
    timeout: 300ms
    state_path: "{state}"
    pagination: {{next_link: links.next}}
    retry: {{backoff: 10ms, max_backoff: 200ms}}
    max_ticks: {ticks}
deserializer:
  json: {{}}
sink:
  file: {{path: "{out}", max_rows: 50}}
"""


def _config(
    tmp: Path,
    name: str,
    url: str,
    *,
    ticks: int = 0,
    interval: str = "50ms",
    state: Path | None = None,
) -> tuple[Path, Path, Path]:
    out, state = tmp / f"{name}.jsonl", state or tmp / f"{name}.state.json"
    path = tmp / f"{name}.yaml"
    path.write_text(
        CONFIG.format(name=name, url=url, ticks=ticks, interval=interval, state=state, out=out)
    )
    return path, out, state


def _run(tmp: Path, *configs: Path) -> SpateRun:
    env = dict(os.environ, READINGS_TOKEN=TOKEN, PYTHONPATH=str(ROOT))
    return SpateRun(tmp, "run", *map(str, configs), env=env)


def _committed(state: Path) -> tuple[int, set[str]]:
    try:
        raw = json.loads(state.read_text())
    except FileNotFoundError:
        return 0, set()
    return int(raw["next_offset"]), set(raw["seen"])


class _Settled:
    """True once the state file has covered the whole output, unchanged, for ``calm``
    seconds: no tick is writing or waiting for its acknowledgement."""

    def __init__(self, state: Path, out: Path, calm: float = 0.5) -> None:
        self.state, self.out, self.calm = state, out, calm
        self.upto: int | None = None
        self.since = 0.0

    def __call__(self) -> bool:
        upto, lines = _committed(self.state)[0], len(read_file_sink(self.out))
        now = time.monotonic()
        if upto != lines or upto != self.upto:
            self.upto, self.since = (upto if upto == lines else None), now
            return False
        return now - self.since >= self.calm


def _key(row: object) -> str:
    assert isinstance(row, dict)
    return json.dumps([row["station_id"], row["timestamp"]], separators=(",", ":"))


@pytest.mark.e2e
def test_b76_kill_9_between_ticks_then_restart_repeats_nothing_acked_loses_nothing(
    tmp_path: Path,
) -> None:
    total = scaled(400, minimum=60)
    # Each reading is in two answers in a row, so a poll lost to the kill is covered by
    # the next one.
    app = Readings(overlap=10, step=5, page_size=4, limit=total)
    with ApiServer(app) as server:
        config, out, state = _config(tmp_path, "readings", server.url, interval="150ms")
        first = _run(tmp_path, config)
        try:
            # Once a third is acknowledged, hold the API (polls repeat its latest answer)
            # and kill at a moment the state file covers the whole file: between ticks,
            # after the last one was acknowledged.
            first.until(lambda: _committed(state)[0] >= total // 3, "a third acknowledged")
            app.hold = True
            first.until(_Settled(state, out), "every written reading acknowledged", every=0.05)
            first.proc.send_signal(signal.SIGKILL)
        finally:
            first.proc.kill()
            first.proc.wait()
        assert first.proc.returncode == -signal.SIGKILL
        upto, acked = _committed(state)
        at_kill = read_file_sink(out)
        assert upto < total  # it really died part-way
        assert upto == len(at_kill)  # between ticks: everything written was acknowledged
        assert acked == {_key(row) for row in at_kill}
        app.hold = False

        second = _run(tmp_path, config)
        try:
            second.until(lambda: len(_committed(state)[1]) >= total, "every reading acknowledged")
            second.proc.send_signal(signal.SIGTERM)
            assert second.wait() == 0, second.text[-3000:]
        finally:
            if second.proc.poll() is None:
                second.proc.kill()
    rows = read_file_sink(out)
    after = [_key(row) for row in rows[len(at_kill) :]]
    assert not acked & set(after), "a reading acknowledged before the kill was delivered again"
    seen = Counter(_key(row) for row in rows)
    assert set(seen) == {_key(reading(n)) for n in range(total)}, "a reading was lost"
    repeated = sum(count - 1 for count in seen.values())
    assert repeated <= len(at_kill) - upto  # only what was written but not acknowledged
    for run in (first, second):
        assert "readings-t0ken" not in run.text
    assert all(r.headers.get("Authorization") == TOKEN for r in server.requests)


def test_b75_faults_are_retried_or_skipped_and_the_pipeline_runs_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Readings(overlap=4, step=2, page_size=3)
    app.fail_next(
        Reply(429, headers={"Retry-After": "1"}),  # retried (waits max_backoff, 200ms)
        Reply(503),  # retried
        Reply(200, b"{}", delay=1.0),  # timed out: the tick is given up
        Reply(200, b"<html>not json</html>"),  # a record error, skipped
    )
    ticks = 6
    with ApiServer(app) as server:
        config, out, state = _config(tmp_path, "faults", server.url, ticks=ticks, interval="20ms")
        monkeypatch.setenv("READINGS_TOKEN", TOKEN)
        report = Pipeline.from_config(config).run()
    assert report.state == "completed", report.reason
    # Two ticks lost to the timeout and the bad body: four ticks answered readings 0..7.
    assert [_key(r) for r in read_file_sink(out)] == [_key(reading(n)) for n in range(8)]
    # Left out by the source before intake: not among records_in (B42).
    assert report.source_dropped == {"not_json": 1, "duplicate": len(app.served) - 8}
    assert report.dropped == {}
    assert f"source_dropped={len(app.served) - 7} (duplicate=" in report.summary()
    assert _committed(state)[0] == 8


def test_b65_b77_two_http_poll_pipelines_in_one_run(tmp_path: Path) -> None:
    north, south = Readings(overlap=5, step=2), Readings(overlap=3, step=3, page_size=2)
    with ApiServer(north) as a, ApiServer(south) as b:
        first, first_out, _ = _config(tmp_path, "north", a.url, ticks=4)
        second, second_out, _ = _config(tmp_path, "south", b.url, ticks=3)
        run = _run(tmp_path, first, second)
        assert run.wait() == 0, run.text[-3000:]
    assert [_key(r) for r in read_file_sink(first_out)] == [_key(reading(n)) for n in range(8)]
    assert [_key(r) for r in read_file_sink(second_out)] == [_key(reading(n)) for n in range(9)]
    assert "pipeline north completed" in run.text
    assert "pipeline south completed" in run.text


def test_b77_two_pipelines_of_one_run_cannot_share_a_state_file(tmp_path: Path) -> None:
    shared = tmp_path / "shared.state.json"
    with ApiServer(Readings()) as a:
        first, _, _ = _config(tmp_path, "east", a.url, interval="1h", state=shared)
        second, _, _ = _config(tmp_path, "west", a.url, interval="1h", state=shared)
        run = _run(tmp_path, first, second)
        run.until(lambda: "is in use by another running source" in run.text, "the refusal")
        run.proc.send_signal(signal.SIGTERM)
        code = run.wait()
    assert code == 1  # one pipeline failed at start-up, the other drained on the signal
