"""A datum that would abort the columnar Avro reader, on the real broker (B110, B98, B28).

jetliner 0.2 aborts the process on an Avro datum whose array declares billions of items.
A topic holds good records and one such datum; a columnar pipeline (``on_error: skip``,
a local Parquet sink) reads it under ``spate run``'s pipeline runtime:

* with the datum scan (B110, the default), the process does not abort: every good record
  is delivered, the poison is a skipped record error (as the row path counts it) and the
  offsets are committed to the end;
* with the scan switched off (``SPATE_AVRO_SCAN=0``), the backstop (B98): the process
  dies with SIGABRT; restarted with the same scratch directory, it delivers every good
  record, counts the poison as a skipped record error and commits past it. A 6 s
  session lets the restarted member take the partition without waiting out the dead
  one's default session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from spate_avro._columnar import _zigzag
from spate_avro._scan import SCAN_ENV
from spate_avro._scratch import SCRATCH_ENV

from tests.kafka._pipeline import kafka_source, pipeline_document, write_document
from tests.support.avro_native import needs_avro_columnar
from tests.support.cli_run import SpateRun
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = [pytest.mark.integration, needs_avro_columnar]

ROOT = Path(__file__).resolve().parents[2]
RUNNER = "tests.kafka._avro_abort_runner"
COUNT = 3000
POISON = 1700
SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "xs", "type": {"type": "array", "items": "long"}},
        {"name": "s", "type": "string"},
    ],
}


def _value(i: int) -> bytes:
    """Event ``i``; the poison declares six billion array items."""
    if i == POISON:
        return _zigzag(i) + _zigzag(6_000_000_000) + _zigzag(1) + _zigzag(0) + _zigzag(1) + b"x"
    return _zigzag(i) + _zigzag(1) + _zigzag(i) + _zigzag(0) + _zigzag(2) + b"ok"


def _run(config: Path, scratch: Path, scan: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.kafka._avro_abort_runner", str(config)],
        cwd=ROOT,
        env={**os.environ, SCRATCH_ENV: str(scratch), SCAN_ENV: "1" if scan else "0"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _written_ids(lake: Path) -> list[int]:
    ids: list[int] = []
    for path in sorted(lake.rglob("*.parquet")):
        ids += pq.read_table(path).column("id").to_pylist()
    return ids


def _setup(kafka_bootstrap: str, tmp_path: Path) -> tuple[str, str, Path]:
    """A topic with the good records and the poison, and a pipeline configuration."""
    topic, group = unique_name("avro-abort"), unique_name("avro-abort-g")
    create_topic(kafka_bootstrap, topic, 1)
    produce_keyed(kafka_bootstrap, topic, COUNT, value=_value, partition=0)
    config = tmp_path / "pipeline.yaml"
    source = kafka_source(kafka_bootstrap, topic, group, stop_at="end", consume_batch=200)
    sink = {
        "parquet": {
            "path": str(tmp_path / "lake"),
            "schema": {"id": "int64", "s": "string"},
            "max_records": 500,
        }
    }
    deserializer = {
        "avro": {"mode": "raw", "schema": {"inline": json.dumps(SCHEMA)}, "on_error": "skip"}
    }
    document = pipeline_document(
        "avro-abort", source, sink, drain_timeout="30s", deserializer=deserializer
    )
    write_document(config, document)
    return topic, group, config


def _delivered(kafka_bootstrap: str, tmp_path: Path, topic: str, group: str) -> None:
    """Every good record written once at least, the offsets committed to the end, and no
    batch left in the scratch directory."""
    assert set(_written_ids(tmp_path / "lake")) == set(range(COUNT)) - {POISON}
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)
    assert not any(p.stat().st_size for p in (tmp_path / "scratch").glob("*.avro"))


def test_b110_the_datum_scan_keeps_the_poison_from_aborting_the_pipeline(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``spate run`` with the scan on (the default): exit 0, the poison one skipped
    malformed record in the summary, every good record delivered, offsets at the end."""
    topic, group, config = _setup(kafka_bootstrap, tmp_path)
    env = {**os.environ, SCRATCH_ENV: str(tmp_path / "scratch"), "PYTHONPATH": str(ROOT)}
    env.pop(SCAN_ENV, None)  # the default: the scan is on
    run = SpateRun(tmp_path, "run", str(config), "--chain", f"{RUNNER}:chains", env=env)
    assert run.wait(timeout=300) == 0, run.text[-3000:]
    assert "dropped=1 (malformed=1) failed=0" in run.text, run.text[-3000:]
    _delivered(kafka_bootstrap, tmp_path, topic, group)


def test_b98_restarted_pipeline_skips_the_datum_that_aborted_the_reader(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic, group, config = _setup(kafka_bootstrap, tmp_path)
    scratch = tmp_path / "scratch"
    first = _run(config, scratch, scan=False)
    assert first.returncode in (-6, 134), (first.returncode, first.stderr[-3000:])
    assert any(p.stat().st_size for p in scratch.glob("*.avro")), "no leftover survived"
    second = _run(config, scratch, scan=False)
    assert second.returncode == 0, second.stderr[-3000:]
    outcome = json.loads(second.stdout.strip().splitlines()[-1])
    assert outcome["deser"].get("skipped") == 1, outcome
    _delivered(kafka_bootstrap, tmp_path, topic, group)
