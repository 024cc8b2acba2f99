"""``router: distributed`` — the shard ClickHouse's Distributed engine would pick (B13).

A Distributed table evaluates its sharding key on each row, takes the (unsigned) result
modulo the sum of the shard weights, and gives the row to the shard whose weight interval
holds it: with weights ``[1, 2]`` remainder 0 goes to shard 0, 1 and 2 to shard 1.
:class:`DistributedPlacement` does exactly that for the key forms ClickHouse users write:

* ``column`` — an integer column taken as it is (signed values as their unsigned
  two's-complement bits at the column's width, as ClickHouse does);
* ``xxHash64(column)`` — xxHash64 of the value's bytes as ClickHouse hashes them: the
  UTF-8 bytes of a String, FixedString padded to its width, numbers little-endian at the
  width of their column type, Date as UInt16 days, DateTime as UInt32 seconds;
* ``intHash64(column)`` — ClickHouse's integer mixer of a (u)int64 value.

The placement is a pure function of the value and the weights, so every process agrees,
and it equals what ClickHouse computes (a test compares 10k keys with chDB's own hash).
Rows are placed by their value, not by the record key: :class:`DistributedRouter` is the
pool's router and reads the sharding column from each row it routes (or takes a whole
column at once, :meth:`DistributedRouter.route_column`).
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Sequence

from spate.errors import ErrorClass, SinkError
from spate.records import Lane

from spate_clickhouse._coerce import BadValue, coercer_for
from spate_clickhouse._encoder import Column
from spate_clickhouse._types import ChType
from spate_clickhouse._xxhash import xxhash64

try:  # the compiled xxHash64 (spate[columnar]); bit-exact with the pure-Python one
    from xxhash import xxh64_intdigest as _xxh64
except ImportError:  # pragma: no cover - the row path needs no extra dependency
    _xxh64 = xxhash64  # type: ignore[assignment]  # takes bytes, which is all it is given

_M64 = 0xFFFFFFFFFFFFFFFF
_INT_WIDTH = {
    "Int8": 1,
    "Int16": 2,
    "Int32": 4,
    "Int64": 8,
    "UInt8": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "Bool": 1,
}


def int_hash64(x: int) -> int:
    """ClickHouse's ``intHash64`` SQL function of a 64-bit value (its mixer of
    ``x ^ 0x4CF2D2BAAE6DA887``)."""
    x = (x & _M64) ^ 0x4CF2D2BAAE6DA887
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _M64
    x ^= x >> 33
    return x


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


def _days(value: object) -> int:
    """Days since 1970-01-01 of a written Date value (a date, or an int already)."""
    if isinstance(value, dt.date):
        return value.toordinal() - _EPOCH_ORDINAL
    return _as_int(value)


def _ticks(value: object, precision: int) -> int:
    """Ticks of 10^-precision s since the epoch of a written DateTime/DateTime64 value."""
    if isinstance(value, dt.datetime):
        delta = value - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        if precision >= 6:
            return micros * int(10 ** (precision - 6))
        return micros // int(10 ** (6 - precision))
    return _as_int(value)


def _as_int(value: object) -> int:
    if isinstance(value, int):
        return value
    raise TypeError(f"expected an integer, got {type(value).__name__}")


def _key_bytes(t: ChType) -> Callable[[object], bytes]:
    """How ClickHouse lays out a written value of type ``t`` for hashing."""
    name = t.name
    if name in _INT_WIDTH:
        width = _INT_WIDTH[name]
        mask = (1 << (8 * width)) - 1
        return lambda v: (int(v) & mask).to_bytes(width, "little")  # type: ignore[call-overload]
    if name == "Enum16":
        return lambda v: (int(v) & 0xFFFF).to_bytes(2, "little")  # type: ignore[call-overload]
    if name == "Enum8":
        return lambda v: (int(v) & 0xFF).to_bytes(1, "little")  # type: ignore[call-overload]
    if name == "Date":
        return lambda v: (_days(v) & 0xFFFF).to_bytes(2, "little")
    if name == "Date32":
        return lambda v: (_days(v) & 0xFFFFFFFF).to_bytes(4, "little")
    if name == "DateTime":
        return lambda v: (_ticks(v, 0) & 0xFFFFFFFF).to_bytes(4, "little")
    if name == "DateTime64":
        precision = next((a for a in t.args if isinstance(a, int)), 3)
        return lambda v: (_ticks(v, precision) & _M64).to_bytes(8, "little")
    if name == "Float64":
        return lambda v: struct.pack("<d", v)
    if name == "Float32":
        return lambda v: struct.pack("<f", v)
    if name == "String":
        return lambda v: v.encode("utf-8") if isinstance(v, str) else bytes(v)  # type: ignore[call-overload]
    if name == "FixedString":
        width = next(a for a in t.args if isinstance(a, int))
        return lambda v: bytes(v).ljust(width, b"\x00")  # type: ignore[call-overload]
    raise ValueError(f"xxHash64 of a {t} column is not supported as a sharding key")


class DistributedPlacement:
    """Shard of a column value under a sharding key and the shards' weights."""

    def __init__(self, function: str, column: Column, weights: Sequence[int]) -> None:
        if not weights or any(w < 1 for w in weights):
            raise ValueError(f"shard weights must be at least 1, got {list(weights)}")
        self.column = column
        self.function = function
        self._slots = [i for i, w in enumerate(weights) for _ in range(w)]
        self._total = len(self._slots)
        t = column.type.unwrapped()
        if column.type.nullable:
            raise ValueError(f"sharding key column {column.name} must not be Nullable")
        self._coerce = coercer_for(column.type)
        if function == "":
            if t.name not in _INT_WIDTH:
                raise ValueError(
                    f"sharding key column {column.name} is {column.type}; a bare column must be "
                    "an integer of at most 64 bits (or use xxHash64(column))"
                )
            mask = (1 << (8 * _INT_WIDTH[t.name])) - 1
            self._hash: Callable[[object], int] = lambda v: int(v) & mask  # type: ignore[call-overload]
        elif function == "intHash64":
            if t.name not in _INT_WIDTH:
                raise ValueError(f"intHash64 needs an integer column, {column.name} is {t}")
            self._hash = lambda v: int_hash64(int(v))  # type: ignore[call-overload]
        elif function == "xxHash64":
            layout = _key_bytes(t)
            self._hash = lambda v: _xxh64(layout(v))
        else:
            raise ValueError(f"unsupported sharding function {function}")

    def hash_of(self, value: object) -> int:
        """The sharding key's value for a column value (raises ``BadValue``)."""
        return self._hash(self._coerce(value))

    def shard_of(self, value: object) -> int:
        return self._slots[self.hash_of(value) % self._total]


class DistributedRouter:
    """The pool's :class:`~spate.sink.Router` for ``router: distributed``: it reads the
    sharding column of each row and places the row by :class:`DistributedPlacement`.

    The placement is fixed in :meth:`start`, which the pool calls once every endpoint's
    probe passed: the sharding column's type comes from the table (``columns``).
    """

    __slots__ = ("_columns", "_function", "_index", "_placement", "_weights", "placed_by")

    def __init__(
        self,
        function: str,
        column: str,
        index: int,
        weights: Sequence[int],
        columns: Callable[[], Sequence[Column]],
    ) -> None:
        self.placed_by: str | None = column
        self._function = function
        self._index = index
        self._weights = list(weights)
        self._columns = columns
        self._placement: DistributedPlacement | None = None

    @property
    def placement(self) -> DistributedPlacement:
        placement = self._placement
        if placement is None:
            raise RuntimeError("the distributed router is not started")
        return placement

    def start(self) -> None:
        """Fix the placement from the sharding column's type; a column that cannot be a
        sharding key raises ``ValueError`` naming it (the pool fails start-up, B29)."""
        column = self._columns()[self._index]
        self._placement = DistributedPlacement(self._function, column, self._weights)

    def route(self, row: object, key: bytes | None, lane: Lane) -> int:
        cls = row.__class__
        try:
            if cls is tuple or cls is list:
                value = row[self._index]  # type: ignore[index]
            elif isinstance(row, dict):
                value = row[self.placed_by]
            else:
                value = getattr(row, self.placed_by)  # type: ignore[arg-type]
            return self.placement.shard_of(value)
        except (BadValue, LookupError, AttributeError, TypeError) as exc:
            raise SinkError(
                f"cannot place the row by {self.placed_by}: {exc}", ErrorClass.RECORD
            ) from None

    def route_column(self, values: Sequence[object], lane: Lane) -> list[int]:
        shard_of = self.placement.shard_of
        try:
            return [shard_of(value) for value in values]
        except (BadValue, TypeError) as exc:
            raise SinkError(
                f"cannot place a row by {self.placed_by}: {exc}", ErrorClass.RECORD
            ) from None
