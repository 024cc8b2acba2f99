"""JSON values of the wrong kind or out of range, through a whole pipeline into ClickHouse,
on the row path and on the columnar path (B87, B28; the regression cases of
``test_columnar_values``).

Each case is one source batch of five JSON records ``{"id": i, "c0": value}`` into a
table ``(id Int64, c0 <type>)`` whose sink skips record errors; the record at offset 2
holds a value the row path refuses. :func:`run_case` runs the batch through one path and
reports what the table holds, the committed offset and the offsets skipped as record
errors (from the skip log line, which names the record's position). Used in-process
against the ClickHouse HTTP front, and by ``python -m tests.clickhouse.columnar_values
DIR`` against an embedded chDB engine (one per process).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from spate import BuildContext, ManualClock, Pipeline
from spate.config import decode
from spate.metrics import Meter
from spate.testing import memory_source

from tests.clickhouse.sinkkit import build_sink

_UUID = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"


@dataclass(frozen=True)
class Case:
    name: str
    chtype: str
    values: tuple[Any, ...]
    stored: tuple[Any, ...]
    """What the table holds for ``c0`` (``SELECT toString(c0)``), in id order."""
    show: str = "toString(c0)"
    """The expression read back for ``c0`` (``stored`` is its text)."""


CASES = (
    Case("float_1e20_into_int64", "Int64", (1, 2, 1e20, 4, 5), ("1", "2", "4", "5")),
    Case("int_2p40_into_int32", "Int32", (1, 2, 2**40, 4, 5), ("1", "2", "4", "5")),
    Case(
        "300_in_array_int8",
        "Array(Int8)",
        ([1], [2], [300, 1], [4], []),
        ("[1]", "[2]", "[4]", "[]"),
    ),
    Case(
        "1_005_into_decimal_10_2",
        "Decimal(10, 2)",
        (1.5, 2.25, 1.005, 4, 5.75),
        ("1.5", "2.25", "4", "5.75"),
    ),
    Case("3_5_into_int64", "Int64", (1, 2, 3.5, 4, 5), ("1", "2", "4", "5")),
    Case(
        "nulls_opening_arrays_beside_text_into_array_nullable_int64",
        "Array(Nullable(Int64))",
        ([1, 2], [None, 3], ["a"], [], [None, None, 4]),
        ("[1,2]", "[NULL,3]", "[]", "[NULL,NULL,4]"),
    ),
    Case("1e39_into_float32", "Float32", (1.5, 2.5, 1e39, 4.5, 5.5), ("1.5", "2.5", "4.5", "5.5")),
    Case("abc_into_int64", "Int64", (1, "12", "abc", 4, 5), ("1", "12", "4", "5")),
    Case("12_5_into_int64", "Int64", ("12", 13, 12.5, "14", 15), ("12", "13", "14", "15")),
    Case(
        "not_a_uuid_into_uuid",
        "UUID",
        (_UUID, _UUID.upper(), "not-a-uuid", _UUID, _UUID),
        (_UUID,) * 4,
    ),
    Case(
        "yes_into_bool",
        "Bool",
        (True, False, "yes", 1, "false"),
        ("true", "false", "true", "false"),
    ),
    Case(
        "offset_time_into_datetime64",
        "DateTime64(3, 'UTC')",
        (
            "2024-01-01T00:00:00+02:00",
            "2024-01-01T00:00:00.5",
            "2024-02-30T00:00:00",
            1_700_000_000_001,
            "2024-06-01T12:00:00Z",
        ),
        (
            "2023-12-31 22:00:00.000",
            "2024-01-01 00:00:00.500",
            "2023-11-14 22:13:20.001",
            "2024-06-01 12:00:00.000",
        ),
    ),
)

BAD_OFFSET = 2
_OFFSET = re.compile(r"offset (\d+)")


class _Skips(logging.Handler):
    """The offsets of the records skipped as record errors (from the skip log lines)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.offsets: list[int] = []
        self.columnar = False

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "runs on the columnar path" in message:
            self.columnar = True
        if "record_error" in message:
            self.offsets.extend(int(m) for m in _OFFSET.findall(message)[:1])


def deser_context(name: str) -> BuildContext:
    """The build context of a deserializer in pipeline ``name``."""
    return BuildContext(
        pipeline=name,
        component="deserializer",
        meter=Meter(name),
        clock=ManualClock(),
        run_nonce="r1",
        budget=None,  # type: ignore[arg-type]  # deserializers take no bytes from the budget
    )


def run_case(url: str, client: Any, case: Case, columnar: bool) -> dict[str, Any]:
    """Run ``case``'s batch through one path into a new table; what came of it."""
    from spate_json import JsonConfig, JsonDeserializerFactory

    table = f"cv_{case.name}_{'columns' if columnar else 'rows'}"
    client.command(f"DROP TABLE IF EXISTS {table}")
    client.command(
        f"CREATE TABLE {table} (id Int64, c0 {case.chtype}) ENGINE = MergeTree ORDER BY id"
    )
    meter = Meter(table)
    built = build_sink(
        {
            "table": table,
            "columns": ["id", "c0"],
            "shards": [{"replicas": [url]}],
            "on_record_error": "skip",
        },
        pipeline=table,
        meter=meter,
    )
    payloads = [orjson.dumps({"id": i, "c0": v}) for i, v in enumerate(case.values)]
    source, handle = memory_source({0: payloads}, batch_size=len(payloads))
    deserializer: Any = JsonDeserializerFactory.build(
        decode(JsonConfig, {}, "deserializer.json"), deser_context(table)
    )
    if not columnar:
        deserializer.columnar = None
    skips = _Skips()
    logger = logging.getLogger("spate")
    logger.addHandler(skips)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        report = Pipeline(
            table,
            source,
            {"events": built.sink},
            deserializer=deserializer,
            meter=meter,
            budget=built.budget,
            handle_signals=False,
        ).run()
    finally:
        logger.removeHandler(skips)
        logger.setLevel(level)
    rows = client.query(f"SELECT id, {case.show} FROM {table} ORDER BY id").result_rows
    return {
        "exit_code": report.exit_code,
        "reason": report.reason,
        "columnar": skips.columnar,
        "rows": [[int(i), str(v)] for i, v in rows],
        "committed": handle.last_committed(0),
        "skipped": skips.offsets,
    }


def run_module(module: str, directory: Path) -> dict[str, Any]:
    """Run ``python -m module DIRECTORY`` (a chDB engine of its own); its JSON result."""
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", module, str(directory)],
        cwd=repo,
        env=dict(os.environ, PYTHONPATH=str(repo)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def check_case(case: Case, result: dict[str, Any], *, columnar: bool) -> None:
    """``result`` (of :func:`run_case`) holds the case's good rows as ``stored``, the
    batch committed and the record at :data:`BAD_OFFSET` skipped, on the given path."""
    assert result["exit_code"] == 0, result["reason"]
    assert result["columnar"] is columnar
    good = [i for i in range(len(case.values)) if i != BAD_OFFSET]
    assert result["rows"] == [[i, v] for i, v in zip(good, case.stored, strict=True)]
    assert result["committed"] == len(case.values)
    assert result["skipped"] == [BAD_OFFSET]


def main(argv: list[str]) -> int:
    import clickhouse_connect

    directory = argv[0]
    client = clickhouse_connect.get_client(interface="chdb", path=directory)
    results = {
        case.name: {
            "rows": run_case(f"chdb://{directory}", client, case, False),
            "columns": run_case(f"chdb://{directory}", client, case, True),
        }
        for case in CASES
    }
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
