"""The CDC example is a configuration ``spate validate`` accepts (B137), and its
chain writes each change into both tables (B373, B374)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from spate import ErrorPolicy, Pipeline
from spate.cli import main
from spate.testing import ManualClock, capture_sink, memory_source
from spate_json import SingleJsonDeserializer

from examples import postgres_cdc_to_clickhouse as example

ROOT = Path(__file__).resolve().parents[1]


def test_b137_the_postgres_cdc_example_validates() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["validate", str(ROOT / "examples" / "postgres_cdc_to_clickhouse.yaml")],
        stdout=out,
        stderr=err,
    )
    assert code == 0, err.getvalue()


def _payloads(table: str) -> list[bytes]:
    path = ROOT / "tests" / "data" / "debezium" / "postgres" / "json-schemas" / f"{table}.jsonl"
    values = [json.loads(line)["value"] for line in path.read_text().splitlines()]
    return [b"" if value is None else value.encode() for value in values]


def test_b373_b374_the_example_chain_writes_each_change_into_both_tables() -> None:
    """Real change events of a REPLICA IDENTITY FULL table (JSON with schemas, the
    tombstone an empty payload) through the JSON deserializer and the example's chain."""
    clock = ManualClock()
    source, handle = memory_source({0: _payloads("orders")})
    items, items_script = capture_sink("items", clock=clock)
    signed, signed_script = capture_sink("items_signed", clock=clock)
    report = (
        Pipeline(
            "cdc",
            source,
            {"items": items, "items_signed": signed},
            deserializer=SingleJsonDeserializer(
                on_error=ErrorPolicy.FAIL, objects_only=True, convert=None
            ),
            clock=clock,
            handle_signals=False,
        )
        .chains(example.chains)
        .run()
    )
    assert report.exit_code == 0
    replacing = [(r["id"], r["status"], r["_is_deleted"]) for r in items_script.rows]
    assert replacing == [(1, "new", 0), (2, "new", 0), (1, "paid", 0), (2, "new", 1)]
    collapsing = [(r["id"], r["status"], r["_sign"]) for r in signed_script.rows]
    assert collapsing == [
        (1, "new", 1),
        (2, "new", 1),
        (1, "new", -1),
        (1, "paid", 1),
        (2, "new", -1),
    ]
    assert handle.last_committed(0) == len(_payloads("orders"))
