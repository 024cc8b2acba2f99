"""A JSON value the row path refuses is a record error for its record alone on the
columnar path too, and the batch's good rows are stored and committed (B87, B28).

Each case (see :mod:`tests.clickhouse.columnar_values`) is one batch of five records
whose record at offset 2 holds a value of the wrong kind or out of range for its column
(a float beyond Int64, 2^40 into Int32, 300 in an Array(Int8), 1.005 into
Decimal(10, 2), 3.5 into Int64, 1e39 into Float32, "abc" into Int64, "not-a-uuid", "yes" into Bool,
a date that does not exist, text into an Array(Nullable(Int64))), beside values the row
path converts (the text "12" into Int64, an upper-case UUID, 1 and "false" into Bool, a
time with an offset) and arrays opening with nulls (B340, once a whole batch's failure).
Both paths run against an embedded chDB engine (in a child process: one engine per
process) and one case through the ClickHouse HTTP front: the table holds the four good
rows with the row path's values, the batch is committed, and the bad record is counted
under its own offset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clickhouse.columnar_values import CASES, Case, check_case, run_case, run_module
from tests.support.chfront_fixtures import ChFront

pytest.importorskip("polars")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chdb_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("chdb") / "engine"
    return run_module("tests.clickhouse.columnar_values", directory)


_check = check_case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_b87_a_refused_value_is_one_record_error_on_both_paths_in_chdb(
    chdb_results: dict[str, Any], case: Case
) -> None:
    results = chdb_results[case.name]
    _check(case, results["rows"], columnar=False)
    _check(case, results["columns"], columnar=True)


def test_b87_a_refused_value_is_one_record_error_through_the_http_front(
    chfront: Any,
) -> None:
    front: ChFront = chfront()
    client = front.client()
    case = next(c for c in CASES if c.name == "abc_into_int64")
    _check(case, run_case(front.url, client, case, False), columnar=False)
    _check(case, run_case(front.url, client, case, True), columnar=True)
