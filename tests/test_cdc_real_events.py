"""Real Debezium change events (captured from PostgreSQL 15 through Debezium 3.6.1 in
Kafka Connect, ``tests/data/debezium/postgres``) through spate.cdc, for each converter:
JSON with and without schemas, and Avro in the Confluent frame (B370-B377)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from spate.cdc import Change, ChangeEventError, DebeziumRows, parse_change

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "debezium" / "postgres"
CONVERTERS = ("json-plain", "json-schemas", "avro")


def _values(converter: str, table: str) -> list[tuple[str, object]]:
    """``(case, decoded value)`` of every record of a table's topic, in topic order."""
    schemas: dict[str, Any] = {}
    if converter == "avro":
        schemas = json.loads((DATA / "avro" / "schemas.json").read_text())
    out: list[tuple[str, object]] = []
    for line in (DATA / converter / f"{table}.jsonl").read_text().splitlines():
        record = json.loads(line)
        raw = record["value"]
        if raw is None:
            out.append((record["case"], None))
        elif converter == "avro":
            body = base64.b64decode(raw)
            schema = fastavro.parse_schema(schemas[str(int.from_bytes(body[1:5], "big"))]["schema"])
            out.append((record["case"], fastavro.schemaless_reader(io.BytesIO(body[5:]), schema)))
        else:
            out.append((record["case"], json.loads(raw)))
    return out


def _apply(
    values: list[tuple[str, object]], engine: str
) -> tuple[dict[int, dict[str, Any]], dict[str, str]]:
    """The table the rows leave (replacing: the greatest version; collapsing: the sign
    sums), and the reason of each refused case."""
    to_rows = DebeziumRows(engine=engine)  # type: ignore[arg-type]
    kept: dict[int, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    for case, value in values:
        try:
            rows = to_rows(value)
        except ChangeEventError as exc:
            refused[case] = str(exc)
            continue
        for row in rows:
            key = int(row["id"])  # type: ignore[call-overload]
            if engine == "replacing":
                if key not in kept or row["_version"] >= kept[key]["_version"]:  # type: ignore[operator]
                    kept[key] = row
            elif row["_sign"] == 1:
                assert key not in kept, f"{case}: a second state row for {key}"
                kept[key] = row
            else:
                state = kept.pop(key)
                state.pop("_sign"), row.pop("_sign")
                # the cancel row is the previous image: equal to the state row it cancels
                # when the table's REPLICA IDENTITY is FULL (orders)
                assert "status" not in row or state == row, f"{case}: cancel row differs"
    if engine == "replacing":
        kept = {k: r for k, r in kept.items() if r["_is_deleted"] == 0}
    return kept, refused


@pytest.mark.parametrize("converter", CONVERTERS)
@pytest.mark.parametrize("engine", ["replacing", "collapsing"])
def test_b373_b374_real_events_of_a_full_identity_table_leave_the_source_table(
    converter: str, engine: str
) -> None:
    kept, refused = _apply(_values(converter, "orders"), engine)
    assert refused == {}
    assert {k: (r["customer_id"], r["amount"], r["status"]) for k, r in kept.items()} == {
        1: (1, 1500, "paid")
    }


@pytest.mark.parametrize("converter", CONVERTERS)
def test_b373_b376_b377_real_events_of_a_default_identity_table(converter: str) -> None:
    kept, refused = _apply(_values(converter, "customers"), "replacing")
    # The TOAST placeholder has no previous value under REPLICA IDENTITY DEFAULT, and a
    # truncate is no rows: both refused with their reasons, everything else written.
    assert set(refused) == {"toast_unchanged", "transaction", "truncate"}
    assert "after.notes: Debezium's unchanged-TOAST placeholder" in refused["toast_unchanged"]
    assert "TRUNCATE cannot be written as rows" in refused["truncate"]
    assert sorted(kept) == [1, 4, 30]  # 2 deleted; 3 became 30 (a delete and a create)
    assert kept[4]["email"] == "d@example.org"  # the column added mid-stream
    assert kept[30]["name"] == "Chen"


@pytest.mark.parametrize("converter", CONVERTERS)
def test_b374_collapsing_refuses_updates_of_a_default_identity_table(converter: str) -> None:
    _, refused = _apply(_values(converter, "customers"), "collapsing")
    assert "REPLICA IDENTITY FULL" in refused["update"]
    assert "REPLICA IDENTITY FULL" not in refused.get("insert", "")


@pytest.mark.parametrize("converter", CONVERTERS)
def test_b371_b372_real_versions_are_the_lsns_and_tombstones_are_no_rows(converter: str) -> None:
    changes: list[tuple[str, Change]] = []
    for case, value in _values(converter, "customers") + _values(converter, "orders"):
        change = parse_change(value)
        if value is None:
            assert change is None
            continue
        assert change is not None
        payload: Any = value["payload"] if converter == "json-schemas" else value  # type: ignore[index]
        assert change.version == payload["source"]["lsn"]
        assert change.tx_id == payload["source"]["txId"]
        changes.append((case, change))
    streamed = [c.version for case, c in changes if case != "snapshot" and c.op != "t"]
    snapshot = max(c.version for case, c in changes if case == "snapshot")
    assert all(v > snapshot for v in streamed)
