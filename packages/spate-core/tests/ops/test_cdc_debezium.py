"""The Debezium envelope (spate.cdc): parsing, versions and the rows of each engine."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate.cdc import (
    TOAST_PLACEHOLDER,
    Change,
    ChangeEventError,
    DebeziumRows,
    image_version,
    parse_change,
    source_version,
)

from tests.support.debezium_events import COLUMNS, event, workload


def _replay_replacing(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """What ``ReplacingMergeTree(_version, _is_deleted)`` FINAL keeps."""
    best: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row["id"] not in best or row["_version"] >= best[row["id"]]["_version"]:
            best[row["id"]] = row
    return {k: {c: r[c] for c in COLUMNS} for k, r in best.items() if r["_is_deleted"] == 0}


def test_b370_op_must_be_a_debezium_operation() -> None:
    with pytest.raises(ChangeEventError, match="op: expected one of c, u, d, r, t, got 'm'"):
        parse_change({**event("c", None, {"id": 1}, 5), "op": "m"})


def test_b370_the_schemas_enable_envelope_is_unwrapped() -> None:
    plain = parse_change(event("u", {"id": 1, "n": 1}, {"id": 1, "n": 2}, 9))
    wrapped = parse_change(event("u", {"id": 1, "n": 1}, {"id": 1, "n": 2}, 9, wrapped=True))
    assert plain == wrapped
    assert plain is not None and plain.version == 9 and plain.tx_id == 1


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"source": None}, "source: expected an object"),
        ({"after": [1]}, "after: expected an object or null, got list"),
        ({"after": None}, "after: an op 'c' event needs the row's new image"),
        ({"ts_ms": "soon"}, "ts_ms: expected an integer"),
        ({"source": {"lsn": -1}}, r"source.lsn: -1 is outside 0..2\^64-1"),
        ({"source": {"lsn": 1 << 64}}, "source.lsn: .* is outside"),
        ({"source": {"lsn": True}}, "source.lsn: expected an integer"),
        ({"source": {"lsn": "0/16B3748"}}, "source.lsn: expected an integer"),
        ({"source": {}}, "source: neither lsn"),
    ],
)
def test_b370_a_malformed_event_names_its_field(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(ChangeEventError, match=message):
        parse_change({**event("c", None, {"id": 1}, 5), **patch})


def test_b370_a_delete_without_before_is_refused() -> None:
    with pytest.raises(ChangeEventError, match="before: a delete needs at least"):
        parse_change(event("d", None, None, 5))


@given(
    st.one_of(
        st.none(),
        st.integers(),
        st.text(),
        st.lists(st.integers()),
        st.dictionaries(
            st.sampled_from(["op", "before", "after", "source", "ts_ms", "schema", "payload"]),
            st.one_of(
                st.none(),
                st.integers(),
                st.text(max_size=3),
                st.booleans(),
                st.dictionaries(
                    st.sampled_from(["lsn", "file", "pos", "row", "id"]), st.integers()
                ),
            ),
        ),
    )
)
@settings(max_examples=300, deadline=None)
def test_b370_any_value_is_a_change_a_tombstone_or_a_change_event_error(value: object) -> None:
    for engine in ("replacing", "collapsing", "versioned_collapsing"):
        try:
            rows = DebeziumRows(engine=engine)(value)  # type: ignore[arg-type]
        except ChangeEventError:
            continue
        assert isinstance(rows, list)


def test_b371_a_tombstone_is_no_row() -> None:
    assert parse_change(None) is None
    assert DebeziumRows()(None) == []
    assert DebeziumRows()({"schema": {"type": "struct"}, "payload": None}) == []


@given(st.integers(0, (1 << 64) - 1))
def test_b372_the_postgresql_version_is_the_lsn(lsn: int) -> None:
    assert source_version({"lsn": lsn, "txId": 3}) == lsn


@given(
    st.lists(
        st.tuples(st.integers(0, (1 << 20) - 1), st.integers(0, (1 << 30) - 1), st.integers(0, 99)),
        min_size=2,
        max_size=10,
    )
)
def test_b372_the_mysql_version_orders_as_file_then_pos_then_row(
    positions: list[tuple[int, int, int]],
) -> None:
    def version(p: tuple[int, int, int]) -> int:
        return source_version({"file": f"mysql-bin.{p[0]:06d}", "pos": p[1], "row": p[2]})

    assert sorted(positions, key=version) == sorted(positions)
    assert all(0 <= version(p) < 1 << 64 for p in positions)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"file": "mysql-bin.000001", "pos": 1 << 30}, "source.pos: .* does not fit"),
        ({"file": "mysql-bin.9999999", "pos": 4}, "source.file: .* does not fit"),
        ({"file": "mysql-bin.000001", "pos": 4, "row": 1 << 14}, "source.row: .* does not fit"),
        ({"file": "binlog", "pos": 4}, "source.file: expected a binlog file name"),
        ({"file": "mysql-bin.000001", "pos": None}, "source.pos: expected an integer"),
    ],
)
def test_b372_a_binlog_position_out_of_range_is_refused(
    source: dict[str, Any], message: str
) -> None:
    with pytest.raises(ChangeEventError, match=message):
        source_version(source)


@given(st.integers(0, 10_000), st.integers(1, 60))
@settings(max_examples=60, deadline=None)
def test_b373_replacing_rows_replayed_equal_the_source_table(seed: int, steps: int) -> None:
    work = workload(seed, steps)
    to_rows = DebeziumRows(engine="replacing")
    rows = [row for value in work.events for row in to_rows(value)]
    assert _replay_replacing(rows) == work.table
    deletes = [r for r in rows if r["_is_deleted"] == 1]
    assert all(r["id"] is not None for r in deletes)


@given(st.integers(0, 10_000), st.integers(1, 60))
@settings(max_examples=60, deadline=None)
def test_b374_collapsing_rows_sum_to_the_source_table_never_below_zero(
    seed: int, steps: int
) -> None:
    work = workload(seed, steps)
    to_rows = DebeziumRows(engine="collapsing")
    sums: dict[int, int] = defaultdict(int)
    state: dict[int, dict[str, Any]] = {}
    for value in work.events:
        for row in to_rows(value):
            sums[row["id"]] += row["_sign"]
            assert sums[row["id"]] in (0, 1)
            if row["_sign"] == 1:
                state[row["id"]] = {c: row[c] for c in COLUMNS}
            else:
                assert state.pop(row["id"]) == {c: row[c] for c in COLUMNS}
    assert state == work.table


def test_b374_an_update_is_a_cancel_row_then_a_state_row() -> None:
    rows = DebeziumRows(engine="collapsing")(event("u", {"id": 1, "n": 1}, {"id": 1, "n": 2}, 7))
    assert rows == [{"id": 1, "n": 1, "_sign": -1}, {"id": 1, "n": 2, "_sign": 1}]


@pytest.mark.parametrize("engine", ["collapsing", "versioned_collapsing"])
@pytest.mark.parametrize("op", ["u", "d"])
def test_b374_collapsing_without_the_previous_image_is_refused(op: str, engine: str) -> None:
    # parse_change already refuses a delete without before; the engine checks it again
    change = Change(op, None, {"id": 1, "n": 2} if op == "u" else None, 7, None, None)  # type: ignore[arg-type]
    with pytest.raises(ChangeEventError, match="REPLICA IDENTITY FULL"):
        DebeziumRows(engine=engine).rows(change)  # type: ignore[arg-type]


def test_b375_versioned_cancel_rows_carry_the_version_of_the_row_they_cancel() -> None:
    to_rows = DebeziumRows(engine="versioned_collapsing")
    (created,) = to_rows(event("c", None, {"id": 1, "n": 1}, 5))
    cancel, state = to_rows(event("u", {"id": 1, "n": 1}, {"id": 1, "n": 2}, 7))
    assert cancel["_version"] == created["_version"] == image_version({"id": 1, "n": 1})
    assert cancel["_sign"] == -1 and state["_sign"] == 1
    assert state["_version"] != cancel["_version"]


def test_b376_an_unchanged_toast_value_is_taken_from_before() -> None:
    before = {"id": 1, "doc": "long text", "n": 1}
    after = {"id": 1, "doc": TOAST_PLACEHOLDER, "n": 2}
    (row,) = DebeziumRows()(event("u", before, after, 9))
    assert row["doc"] == "long text" and row["n"] == 2


@pytest.mark.parametrize(
    "placeholder", [TOAST_PLACEHOLDER, TOAST_PLACEHOLDER.encode(), [TOAST_PLACEHOLDER]]
)
def test_b376_an_unchanged_toast_value_without_before_is_refused(placeholder: object) -> None:
    after = {"id": 1, "doc": placeholder}
    with pytest.raises(ChangeEventError, match=r"after\.doc: Debezium's unchanged-TOAST"):
        DebeziumRows()(event("u", None, after, 9))


def test_b377_a_truncate_is_refused_with_its_reason() -> None:
    value = {**event("c", None, None, 9), "op": "t"}
    with pytest.raises(ChangeEventError, match="a TRUNCATE cannot be written as rows"):
        DebeziumRows()(value)


def test_b377_a_truncate_is_skipped_with_a_warning_when_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    value = {**event("c", None, None, 9), "op": "t"}
    assert DebeziumRows(truncate="skip")(value) == []
    assert "a TRUNCATE (version 9) is skipped" in caplog.text


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="engine: expected replacing"):
        DebeziumRows(engine="summing")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="truncate: expected refuse or skip"):
        DebeziumRows(truncate="ignore")  # type: ignore[arg-type]
