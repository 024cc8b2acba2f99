"""A table with every column type the ClickHouse sink supports, and deterministic rows for it.

Used to prove a write path end to end: the same seed gives the same rows in every process,
so an insert through the HTTP front can be compared with the same insert through the
``chdb://`` backend, and values read back can be compared with what was sent. Values cover
the edges of each type (integer limits, NaN and infinities, empty and multi-byte strings,
escapes, NULLs, empty arrays and maps, dates far from the epoch).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "UInt64"),
    ("i8", "Int8"),
    ("i16", "Int16"),
    ("i32", "Int32"),
    ("i64", "Int64"),
    ("i128", "Int128"),
    ("u8", "UInt8"),
    ("u16", "UInt16"),
    ("u32", "UInt32"),
    ("u64", "UInt64"),
    ("u256", "UInt256"),
    ("f32", "Float32"),
    ("f64", "Float64"),
    ("dec9", "Decimal(9, 2)"),
    ("dec38", "Decimal(38, 10)"),
    ("s", "String"),
    ("fs", "FixedString(8)"),
    ("d", "Date"),
    ("d32", "Date32"),
    ("ts", "DateTime"),
    ("ts3", "DateTime64(3)"),
    ("ts6", "DateTime64(6)"),
    ("uid", "UUID"),
    ("n_i32", "Nullable(Int32)"),
    ("n_s", "Nullable(String)"),
    ("lc", "LowCardinality(String)"),
    ("lc_n", "LowCardinality(Nullable(String))"),
    ("arr_i", "Array(Int32)"),
    ("arr_s", "Array(String)"),
    ("arr_n", "Array(Nullable(Float64))"),
    ("m", "Map(String, Int64)"),
    ("m_arr", "Map(LowCardinality(String), Array(UInt8))"),
    ("tup", "Tuple(Int32, String)"),
    ("e8", "Enum8('red' = 1, 'green' = 2, 'blue' = -3)"),
    ("e16", "Enum16('low' = -1000, 'high' = 1000)"),
    ("flag", "Bool"),
)
NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)

_WORDS: tuple[str, ...] = (
    "",
    "a",
    "ü",
    "naïve café",
    "日本語",
    "emoji 🦆",
    "tab\there",
    "line\nbreak",
)
_WORDS += ("back\\slash", "quote's", 'dq"', "nul\x00byte", "x" * 300)
_LC = tuple(f"category-{i}" for i in range(40))
_EPOCH_DAY = dt.date(1970, 1, 1)


def create_table_sql(table: str, extra_settings: str = "") -> str:
    """``CREATE TABLE`` for the all-types table (MergeTree ordered by ``id``)."""
    columns = ",\n    ".join(f"`{name}` {ch_type}" for name, ch_type in COLUMNS)
    settings = f" SETTINGS {extra_settings}" if extra_settings else ""
    return f"CREATE TABLE {table} (\n    {columns}\n) ENGINE = MergeTree ORDER BY id{settings}"


def _f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _text(rng: random.Random) -> str:
    return rng.choice(_WORDS) + str(rng.randint(0, 10**6))


def _int_map(rng: random.Random) -> dict[str, int]:
    return {
        f"k{rng.randint(0, 99)}": rng.randint(-(2**63), 2**63 - 1) for _ in range(rng.randint(0, 4))
    }


def _array_map(rng: random.Random) -> dict[str, list[int]]:
    return {
        rng.choice(_LC): [rng.randint(0, 255) for _ in range(rng.randint(0, 3))] for _ in range(2)
    }


def _row(i: int, rng: random.Random) -> tuple[Any, ...]:
    edge = i % 97
    i8 = -128 if edge == 0 else 127 if edge == 1 else rng.randint(-128, 127)
    i64 = -(2**63) if edge == 2 else 2**63 - 1 if edge == 3 else rng.randint(-(2**63), 2**63 - 1)
    u64 = 2**64 - 1 if edge == 4 else rng.getrandbits(64)
    if edge == 5:
        f32, f64 = math.inf, math.nan
    elif edge == 6:
        f32, f64 = -math.inf, -0.0
    else:
        f32, f64 = _f32(rng.uniform(-1e6, 1e6)), rng.uniform(-1e300, 1e300)
    second = rng.randint(0, 2**32 - 1)
    micros = rng.randint(-1_000_000_000_000_000, 4_000_000_000_000_000)  # 1938 .. 2096
    ts6 = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
    ts3 = ts6.replace(microsecond=ts6.microsecond // 1000 * 1000)
    return (
        i,
        i8,
        rng.randint(-(2**15), 2**15 - 1),
        rng.randint(-(2**31), 2**31 - 1),
        i64,
        rng.randint(-(2**127), 2**127 - 1),
        rng.randint(0, 255),
        rng.randint(0, 2**16 - 1),
        rng.randint(0, 2**32 - 1),
        u64,
        rng.getrandbits(256),
        f32,
        f64,
        Decimal(rng.randint(-(10**9) + 1, 10**9 - 1)).scaleb(-2),
        Decimal(rng.randint(-(10**38) + 1, 10**38 - 1)).scaleb(-10),
        _text(rng),
        bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 8))).ljust(8, b"\x00"),
        _EPOCH_DAY + dt.timedelta(days=rng.randint(0, 65_535)),
        dt.date(1900, 1, 1) + dt.timedelta(days=rng.randint(0, 146_000)),
        dt.datetime(1970, 1, 1) + dt.timedelta(seconds=second),
        ts3,
        ts6,
        uuid.UUID(int=rng.getrandbits(128)),
        None if i % 5 == 0 else rng.randint(-(2**31), 2**31 - 1),
        None if i % 7 == 0 else _text(rng),
        rng.choice(_LC),
        None if i % 3 == 0 else rng.choice(_LC),
        [rng.randint(-(2**31), 2**31 - 1) for _ in range(rng.randint(0, 5))],
        [_text(rng) for _ in range(rng.randint(0, 3))],
        [None if rng.random() < 0.2 else rng.uniform(-1, 1) for _ in range(rng.randint(0, 4))],
        _int_map(rng),
        _array_map(rng),
        (rng.randint(-(2**31), 2**31 - 1), _text(rng)),
        rng.choice(("red", "green", "blue")),
        rng.choice(("low", "high")),
        rng.random() < 0.5,
    )


def rows(count: int, seed: int = 20261130, start: int = 0) -> list[tuple[Any, ...]]:
    """``count`` rows with ids ``start..start+count-1``; the same arguments give the same rows."""
    rng = random.Random(seed)
    return [_row(start + i, rng) for i in range(count)]


def _normal(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_normal(v) for v in value)
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def normalise(row: Sequence[Any]) -> tuple[Any, ...]:
    """A row as read back through clickhouse-connect, comparable with ``==``.

    NaN becomes a marker (NaN never equals itself) and FixedString is padded with zero
    bytes to its width, as ClickHouse stores it.
    """
    values = list(row)
    fs = NAMES.index("fs")
    raw = values[fs]
    if isinstance(raw, str):
        raw = raw.encode()
    values[fs] = bytes(raw).ljust(8, b"\x00")
    return tuple(_normal(v) for v in values)
