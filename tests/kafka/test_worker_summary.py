"""``spate run --processes 2``: each worker's lines are labelled ``worker=<index>`` and
the parent ends with one line totalling the workers' runs (issue of unlabelled
per-worker summaries)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from spate.testing import read_file_sink

from tests.kafka._pipeline import kafka_source, pipeline_document, write_document
from tests.support.scale import scaled
from tests.support.services import create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration


def test_two_workers_label_their_lines_and_the_parent_logs_the_total(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic, group = unique_name("wsum"), unique_name("wsum-g")
    create_topic(kafka_bootstrap, topic, 4)
    count = scaled(4_000, minimum=400)
    produce_keyed(kafka_bootstrap, topic, count)
    out = tmp_path / "out"
    config = tmp_path / "wsum.yaml"
    source = kafka_source(
        kafka_bootstrap,
        topic,
        group,
        stop_at="end",
        commit_interval=None,
        session_timeout_ms=None,
    )
    sink = {"file": {"path": str(out / "rows.jsonl")}}
    write_document(config, pipeline_document("wsum", source, sink, drain_timeout=None))
    out.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "spate.cli", "run", str(config), "--processes", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    log = run.stderr
    assert run.returncode == 0, log[-3000:]
    summaries = [line for line in log.splitlines() if "wsum completed" in line]
    assert len(summaries) == 2, log[-3000:]
    labels = [re.search(r"worker=(\d)", line) for line in summaries]
    assert sorted(m.group(1) for m in labels if m is not None) == ["0", "1"], summaries
    total = re.search(r"total of 2 worker\(s\), 2 run\(s\): records in=(\d+) delivered=(\d+)", log)
    assert total is not None, log[-3000:]
    # Every record was polled by one of the workers (by both after a rebalance replay).
    assert int(total.group(1)) >= count and int(total.group(2)) >= count
    assert len(read_file_sink(out / "rows.jsonl")) >= count
