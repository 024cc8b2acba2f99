"""A spool tier in front of the Hugging Face sink: records stay in the spool while the
Hub fails commits, are handed on again within the run, and leave it only once a commit
landed (B79, B54, B56, B66).

Driven against the Hub test server (the documented commit API on loopback) through
spate's real ``SpoolTier`` and JSON-lines store on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from spate import AckStatus, AckToken, Lane, SystemClock
from spate.config import parse_config
from spate.errors import ConfigError
from spate.metrics import Meter
from spate.plugins import default_registry
from spate.sink import JsonlStore, SpoolConfig, SpoolTier
from spate_huggingface import HuggingFaceSink

from tests.support.hub import HubServer

from .harness import REPO, TOKEN, body, make_sink, parquet_rows

LANE = Lane("readings", 0)


def _spool(directory: Path, sink: HuggingFaceSink) -> SpoolTier:
    config = SpoolConfig(dir=str(directory), ack="spooled", max_records=50)
    store = JsonlStore(str(directory), segment_bytes=config.segment_bytes)
    meter = Meter("p", CollectorRegistry())
    spool = SpoolTier("spool", config, sink, store, meter=meter, clock=SystemClock())
    spool.start()
    return spool


def _offer(spool: SpoolTier, rows: list[dict[str, object]], batch: int = 25) -> list[AckToken]:
    tokens = []
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        token = AckToken(LANE, 1, start, start + len(chunk), len(chunk), lambda t: None)
        for row in chunk:
            spool.offer(row, None, LANE, token)
        token.release(True)
        tokens.append(token)
    spool.tick()  # seal, fsync, release the source acks (ack: spooled), hand on
    return tokens


def _rows(count: int) -> list[dict[str, object]]:
    return [{"seq": i, "station": f"s{i % 3}", "value": i / 4} for i in range(count)]


def _wait(condition: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_b79_a_failing_hub_keeps_records_in_the_spool_until_a_commit_lands(
    hub: HubServer, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    hub.fail_commits(4, status=503)
    sink = make_sink(
        body(hub, retry={"initial": "50ms", "max": "100ms", "max_attempts": 10}), start=False
    )
    spool = _spool(spool_dir, sink)
    rows = _rows(100)
    try:
        tokens = _offer(spool, rows)
        assert all(t.status is AckStatus.DELIVERED for t in tokens)  # custody: the spool
        sink.flush(time.monotonic())  # seal the window: the commit attempts start
        _wait(lambda: hub.attempts >= 2, "two failed commit attempts")
        assert hub.files(REPO) == {}
        assert os.listdir(spool_dir), "the records left the spool before a commit landed"
        assert spool.flush(time.monotonic() + 60)
    finally:
        spool.close()
    assert hub.answers == [503, 503, 503, 503, 200]
    assert os.listdir(spool_dir) == []
    assert sorted(r["seq"] for r in parquet_rows(hub.files(REPO))) == list(range(100))


def test_b66_when_retries_run_out_the_spool_hands_the_batch_on_again_in_the_same_run(
    hub: HubServer, tmp_path: Path
) -> None:
    """B79, B66: the sink's own retries run out and the window fails; the spool
    (``ack: spooled``) keeps the batch and hands it on again after its backoff, within the
    same run: the commit lands later and the spool ends empty."""
    spool_dir = tmp_path / "spool"
    hub.fail_commits(2, status=503)
    retry = {"initial": "10ms", "max": "20ms", "max_attempts": 2}
    sink = make_sink(body(hub, retry=retry), start=False)
    spool = _spool(spool_dir, sink)
    try:
        _offer(spool, _rows(60))
        assert spool.flush(time.monotonic() + 60)  # the window's two attempts fail
        assert sink.windows_failed == 1 and hub.files(REPO) == {}
        assert os.listdir(spool_dir), "a failed commit's records must stay in the spool"

        def retried() -> bool:
            spool.tick()  # the retry is due about 1 s after the failure
            spool.flush(time.monotonic() + 30)
            return not os.listdir(spool_dir)

        _wait(retried, "the spool to hand the failed batch on again and empty")
    finally:
        spool.close()
    # The spool's two batches (50 + 10 rows) may be retried at different ticks.
    assert hub.answers[:2] == [503, 503] and set(hub.answers[2:]) == {200}
    assert sorted(r["seq"] for r in parquet_rows(hub.files(REPO))) == list(range(60))


def test_b17_a_huggingface_terminal_under_a_spool_is_validated_in_yaml(hub: HubServer) -> None:
    text = f"""\
source:
  memory: {{records: 10}}
sink:
  tiered:
    tiers:
      - spool: {{dir: /tmp/unused-spool, ack: spooled}}
    terminal:
      huggingface:
        repo: {REPO}
        endpoint: {hub.endpoint}
        encoder: {{compression: zstd, level: 30}}
"""
    with pytest.raises(ConfigError) as err:
        parse_config(text, resolver=default_registry())
    assert err.value.path == "sink.tiered.terminal.huggingface.encoder.level"
    parse_config(text.replace("level: 30", "level: 19"), resolver=default_registry())


def test_b79_spate_run_through_a_spool_to_a_failing_hub_commits_everything_on_drain(
    hub: HubServer, tmp_path: Path
) -> None:
    """``spate run``: memory source → JSON → spool → huggingface, the Hub failing the
    first commits; the run completes, every record is committed, the spool is empty."""
    hub.fail_commits(3, status=503)
    spool_dir = tmp_path / "spool"
    payloads = [json.dumps({"seq": i, "station": f"s{i % 4}"}) for i in range(120)]
    config = tmp_path / "hub.yaml"
    config.write_text(
        f"""\
pipeline: {{name: readings-to-hub}}
checkpoint: {{interval: 100ms}}
admin: {{listen: none}}
source:
  memory: {{partitions: 2, payloads: {json.dumps(payloads)}, batch_size: 25}}
deserializer:
  json: {{}}
sink:
  tiered:
    tiers:
      - spool: {{dir: "{spool_dir}", ack: spooled, max_records: 40}}
    terminal:
      huggingface:
        repo: {REPO}
        endpoint: {hub.endpoint}
        path_template: "data/station={{station}}/part-{{hash}}.{{ext}}"
        retry: {{initial: 50ms, max: 200ms, max_attempts: 8}}
""",
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "run", str(config)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HF_TOKEN": TOKEN},
    )
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stderr and TOKEN not in result.stdout
    assert hub.answers[:3] == [503, 503, 503] and hub.answers[-1] == 200
    assert os.listdir(spool_dir) == []
    files = hub.files(REPO)
    assert {p.split("/")[1] for p in files} == {
        "station=s0",
        "station=s1",
        "station=s2",
        "station=s3",
    }
    seqs = sorted(r["seq"] for r in parquet_rows(files))
    assert seqs == sorted([*range(120), *range(120)])  # every lane carries the payloads
