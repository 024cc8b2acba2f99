"""The collector example, ``examples/api_to_dataset.py``, end to end on loopback.

The example runs as its own process against the API test server (answers overlapping
the previous ones) and the test server implementing the Hub's commit API, with short
intervals instead of a minute and an hour. Once every reading is spooled it gets
SIGTERM, and:

* every distinct reading the API served is in the dataset exactly once, read back from
  the committed Parquet files with pyarrow (B74: repeats dropped by key);
* the drain committed what the spool held and the spool directory is empty (B14, B79);
* the run exits 0 and the Hub token never reaches its log (B16, B67).

The TOML variant of the configuration loads to the same pipeline as the YAML (B17).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from spate import load_config

from tests.support.collector import EXAMPLE, TOKEN, parquet_rows, run_collector
from tests.support.scale import scaled


def test_b74_b79_collector_example_commits_every_reading_once_and_drains_the_spool(
    tmp_path: Path,
) -> None:
    run = run_collector(tmp_path, readings=scaled(120, minimum=24), poll="200ms", window="2s")
    assert run.exit_code == 0, run.log[-3000:]
    committed: Counter[tuple[str, int]] = Counter()
    for path, data in run.files.items():
        assert path.startswith("data/date=") and path.endswith(".parquet"), path
        rows = parquet_rows(data)
        assert rows, path
        for row in rows:
            assert f"/station_id={row['station_id']}/" in path
            committed[(str(row["station_id"]), int(str(row["timestamp"])))] += 1
    assert set(committed) == run.served
    assert max(committed.values()) == 1, [key for key, n in committed.items() if n > 1]
    assert run.spool.is_dir()
    assert run.spool_entries == []
    assert TOKEN not in run.log


def test_b17_the_toml_configuration_is_the_yaml_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("READINGS_URL", "http://127.0.0.1:1/readings")
    monkeypatch.setenv("HF_REPO", "spate-demo/station-readings")
    yaml_config = load_config(EXAMPLE.with_suffix(".yaml"))
    toml_config = load_config(EXAMPLE.with_suffix(".toml"))
    assert toml_config.file != yaml_config.file
    assert toml_config.source == yaml_config.source
    assert toml_config.deserializer == yaml_config.deserializer
    assert toml_config.sinks == yaml_config.sinks
    assert toml_config.pipeline == yaml_config.pipeline
    assert toml_config.checkpoint == yaml_config.checkpoint
    assert toml_config.admin == yaml_config.admin
