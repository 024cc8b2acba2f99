"""An Arrow ``MapArray`` converts into a ClickHouse ``Map`` column without crashing (B171).

``pyarrow.compute.list_parent_indices`` aborts the whole process on a ``MapArray`` (a
failed type check in Arrow's C++, not an exception), so the conversion finds each
entry's row from the map's offsets instead. The conversion runs in a child process, so
that a regression shows as a failed test rather than a dead test run; a sliced map (whose
keys and items are the whole child arrays) keeps only its own entries; the converted
column is inserted into a real ``Map(String, …)`` column over the ClickHouse HTTP front.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from spate_clickhouse._coerce import coercer_for
from spate_clickhouse._types import parse_type

pa = pytest.importorskip("pyarrow")

MAPS: list[Any] = [
    {"a": 1, "b": 300},  # 300 does not fit UInt8: a record error for this row alone
    None,  # NULL in a Map column that is not Nullable: refused
    {},
    {"c": 7},
    {"d": -1, "e": 2},  # -1 does not fit UInt8 either
    {"f": 255},
]
CHTYPE = "Map(String, UInt8)"

_CHILD = """
import json, sys
import pyarrow as pa
from spate_clickhouse._arrowvalues import convert_column
from spate_clickhouse._types import parse_type

maps, chtype, start = json.loads(sys.argv[1])
array = pa.array(
    [None if m is None else list(m.items()) for m in maps], pa.map_(pa.string(), pa.int64())
).slice(start)
out, bad = convert_column(array, parse_type(chtype))
rows = [None if v is None else [list(kv) for kv in v] for v in out.to_pylist()]
print(json.dumps({"bad": [p for p, _ in bad], "rows": rows, "type": str(out.type)}))
"""


def _convert_in_child(start: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([MAPS, CHTYPE, start])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _row_path(maps: list[Any]) -> tuple[list[int], list[Any]]:
    """The positions the row path's coercer refuses, and its value for every other."""
    coerce = coercer_for(parse_type(CHTYPE))
    bad, good = [], []
    for position, value in enumerate(maps):
        try:
            good.append(coerce(value))
        except Exception:
            bad.append(position)
            good.append(None)
    return bad, good


@pytest.mark.parametrize("start", [0, 1, 3])
def test_b171_a_map_array_converts_in_a_child_process_as_the_row_path_coerces(
    start: int,
) -> None:
    result = _convert_in_child(start)
    maps = MAPS[start:]
    want_bad, want = _row_path(maps)
    assert result["bad"] == want_bad
    for position, (row, value) in enumerate(zip(result["rows"], want, strict=True)):
        if position in want_bad:
            continue
        assert value is not None
        assert {k: v for k, v in row} == value


@pytest.mark.integration
def test_b171_a_converted_map_array_lands_in_a_clickhouse_map_column(chfront: Any) -> None:
    from spate_clickhouse._arrowvalues import convert_column
    from spate_clickhouse._frames import arrow_stream

    array = pa.array(
        [list(m.items()) for m in MAPS if m is not None], pa.map_(pa.string(), pa.int64())
    ).slice(1)
    converted, bad = convert_column(array, parse_type(CHTYPE))
    bad_rows = {p for p, _ in bad}
    keep = pa.array([i not in bad_rows for i in range(len(array))])
    ids = pa.array(range(len(array)), pa.int64())
    table = pa.table({"id": ids, "m": converted}).filter(keep)
    client = chfront().client()
    client.command(f"CREATE TABLE maps (id Int64, m {CHTYPE}) ENGINE = MergeTree ORDER BY id")
    client.raw_insert("maps", ["id", "m"], insert_block=arrow_stream([table]), fmt="ArrowStream")
    got = client.query("SELECT id, m FROM maps ORDER BY id").result_rows
    want_bad, want = _row_path([m for m in MAPS if m is not None][1:])
    assert sorted(bad_rows) == want_bad
    assert [(i, dict(m)) for i, m in got] == [
        (i, v) for i, v in enumerate(want) if i not in want_bad
    ]
