"""JSON, Variant and Dynamic columns round trip through a whole pipeline into an embedded
chDB engine on the row path and on the columnar path (B310-B315).

Each case (see :mod:`tests.clickhouse.semistructured_values`) is one batch of five JSON
records whose record at offset 2 holds a value its column cannot take: a JSON object into
a ``Variant`` without a ``Map`` member, a float into ``Variant(String, Array(Int64),
Bool)``, text that is neither a number nor a date into ``Variant(Int64, Date32)``, an
object or a nested list into ``Dynamic``, a string into ``JSON``, ``"abc"`` at an ``Int32``
typed path. That record is a record error for its record alone (skipped, the batch
committed); the others are stored with the member or type their value has — text stays
``String`` beside numbers in a Variant (clickhouse-connect's #534), a Dynamic integer is
an ``Int64`` and a NULL is NULL (not the text clickhouse-connect sends), nested objects,
arrays and nulls keep their shape in a JSON column, a typed path's text is parsed and a
skipped path dropped — and the columnar path stores exactly what the row path does. Both
paths run in one child process (one chDB engine per process); the same cases run through
the ClickHouse HTTP front when the local services are up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clickhouse.columnar_values import BAD_OFFSET, Case, check_case, run_case, run_module
from tests.clickhouse.semistructured_values import CASES, ROW_CASES

pytest.importorskip("polars")
pytest.importorskip("pyarrow")
pytest.importorskip("chdb")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("chdb") / "engine"
    return run_module("tests.clickhouse.semistructured_values", directory)


_check = check_case


def _case(name: str) -> Case:
    return next(c for c in (*CASES, *ROW_CASES) if c.name == name)


@pytest.mark.parametrize(
    "name",
    [
        "variant_string_and_numbers",
        "variant_nulls_and_arrays",
        "array_of_variants",
        "array_of_variants_mixed",
    ],
)
def test_b310_a_variant_keeps_each_values_member_strings_beside_numbers(
    results: dict[str, Any], name: str
) -> None:
    """B310: text stays String beside Int64 and Float64 members, NULL is NULL, a list
    goes to the Array member, a bool to Bool."""
    _check(_case(name), results[name]["rows"], columnar=False)


def test_b310_text_goes_to_another_member_when_the_variant_has_no_string(
    results: dict[str, Any],
) -> None:
    name = "variant_text_into_other_members"
    _check(_case(name), results[name]["rows"], columnar=False)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_b311_a_value_that_fits_no_member_or_type_is_one_record_error_on_both_paths(
    results: dict[str, Any], name: str
) -> None:
    """B311 (and B315 for the columnar half): the refused record is skipped under
    ``on_record_error: skip``, the other four stored and the batch committed."""
    case = _case(name)
    for path, columnar in (("rows", False), ("columns", True)):
        result = results[name][path]
        assert result["columnar"] is columnar, path
        assert result["skipped"] == [BAD_OFFSET], path
        assert result["committed"] == len(case.values), path
        assert len(result["rows"]) == len(case.values) - 1, path


@pytest.mark.parametrize(
    "name", ["dynamic_scalars", "dynamic_arrays_and_nulls", "dynamic_mixed_array"]
)
def test_b312_a_dynamic_value_is_stored_with_its_own_type_and_null_as_null(
    results: dict[str, Any], name: str
) -> None:
    _check(_case(name), results[name]["rows"], columnar=False)


@pytest.mark.parametrize("name", ["json_nested_objects", "json_mixed_array"])
def test_b313_json_objects_keep_nested_objects_mixed_arrays_and_nulls(
    results: dict[str, Any], name: str
) -> None:
    _check(_case(name), results[name]["rows"], columnar=False)


def test_b314_a_typed_path_is_checked_and_converted_and_a_skipped_path_dropped(
    results: dict[str, Any],
) -> None:
    name = "json_typed_paths_and_skip"
    _check(_case(name), results[name]["rows"], columnar=False)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_b315_the_columnar_path_stores_what_the_row_path_stores(
    results: dict[str, Any], name: str
) -> None:
    case = _case(name)
    _check(case, results[name]["columns"], columnar=True)
    assert results[name]["columns"]["rows"] == results[name]["rows"]["rows"]


@pytest.mark.integration
def test_b315_both_paths_store_the_same_through_the_clickhouse_http_front(
    clickhouse_url: str,
) -> None:
    """B310-B315 over HTTP: the same cases through the ClickHouse HTTP front."""
    from urllib.parse import urlparse

    import clickhouse_connect

    address = urlparse(clickhouse_url)
    client = clickhouse_connect.get_client(host=address.hostname, port=address.port)
    for case in CASES:
        rows = run_case(clickhouse_url, client, case, False)
        _check(case, rows, columnar=False)
        _check(case, run_case(clickhouse_url, client, case, True), columnar=True)
    for case in ROW_CASES:
        _check(case, run_case(clickhouse_url, client, case, False), columnar=False)
