"""The sink on ``chdb://`` replicas: dedup of a retried batch (B9) and schema check (B20).

chDB hosts one engine per process, so each case runs the sink in a child process
(``tests.clickhouse.chdb_child``) with a data directory of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clickhouse.chdb_child import run_child as _child


def test_b9_a_batch_resent_with_its_token_is_kept_once_in_chdb(tmp_path: Path) -> None:
    # first write, the retry with the same token, then the next batch's token
    assert _child("dedup", str(tmp_path / "ch"))["counts"] == [500, 500, 1000]


def test_b20_a_missing_column_fails_start_on_chdb(tmp_path: Path) -> None:
    directory = tmp_path / "ch"
    result = _child("schema", str(directory))
    assert result["class"] == "fatal"
    assert f"column extra not in narrow on chdb://{directory}" in result["error"]


def test_a_second_chdb_directory_in_one_process_is_refused_naming_both(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    result = _child("twodirs", str(first), str(second))
    assert result["class"] == "fatal"
    assert "one engine per process" in result["error"]
    assert str(first) in result["error"] and str(second) in result["error"]


@pytest.mark.parametrize("engine", ["replacing", "collapsing", "versioned_collapsing"])
@pytest.mark.parametrize("seed", [1, 2])
def test_b379_change_events_replayed_under_tokens_leave_final_equal_to_the_source(
    tmp_path: Path, engine: str, seed: int
) -> None:
    result = _child("cdc", str(tmp_path / "ch"), engine, str(seed))
    assert result["replays"] > 0
    assert result["final_equal"], result
    if engine != "replacing":
        assert result["sums_equal"], result
        assert result["sign_range"] == [0, 1], result  # no key ever below zero or doubled
