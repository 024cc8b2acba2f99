"""The table's ``PARTITION BY`` key computed client-side, vectorized (B240, B241, B243).

ClickHouse refuses an insert whose rows fall into more than
``max_partitions_per_insert_block`` partitions (code 252, ``TOO_MANY_PARTS``: "Too many
partitions for single INSERT block"). The sink reads the table's partition key at start
(``system.tables.partition_key``) and, for the common expressions, computes each row's
partition with pyarrow compute over the whole block:

==========================  ===================================================
``toYYYYMM(c)``             ``year * 100 + month`` of a Date/DateTime column
``toYYYYMMDD(c)``           ``year * 10000 + month * 100 + day``
``toDate(c)``               the day (``Date``)
``toStartOfHour(c)``        the hour (``DateTime``)
``intDiv(c, n)``            integer division of an integer column, truncated
``c``                       the column's value
``(a, b, …)``, ``tuple(…)``  a tuple of the above
==========================  ===================================================

``DateTime`` values are taken in the column's time zone (``DateTime('Europe/Paris')``),
else the server's (``SELECT timezone()``), as the server computes them. Any other
expression is :data:`None` from :func:`parse_key`: the writer then splits a refused block
in halves (:mod:`spate_clickhouse._blocks`).

Does not own: cutting blocks (:mod:`spate_clickhouse._blocks`), reading the key from the
server (the writer's probe). The comparison with the server's own results is
``packages/spate-clickhouse/tests/test_clickhouse_partition.py`` (B243).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from spate_clickhouse._types import ChType

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["PartitionKey", "Term", "parse_key"]

Function = Literal["toYYYYMM", "toYYYYMMDD", "toDate", "toStartOfHour", "intDiv", ""]

_CALL = re.compile(r"^(?P<fn>toYYYYMM|toYYYYMMDD|toDate|toStartOfHour|intDiv)\((?P<args>[^()]*)\)$")
_NAME = re.compile(r"^`?(?P<name>[A-Za-z_][A-Za-z0-9_]*)`?$")
_TIME_FUNCTIONS = frozenset({"toYYYYMM", "toYYYYMMDD", "toDate", "toStartOfHour"})
_DAY = 86_400
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "GMT", "UTC0", "Etc/GMT", "Universal", "Zulu"})


@dataclass(frozen=True, slots=True)
class Term:
    """One element of the partition key: ``function(column[, divisor])``."""

    function: Function
    column: str
    type: ChType
    """The column's type without ``Nullable``/``LowCardinality``."""
    divisor: int = 1
    timezone: str = "UTC"
    """The time zone the server computes this term's date parts in."""

    @property
    def is_time(self) -> bool:
        """Whether the term's partitions are spans of time (``late_data`` needs one)."""
        if self.function in _TIME_FUNCTIONS:
            return True
        return self.function == "" and self.type.name in (
            "Date",
            "Date32",
            "DateTime",
            "DateTime64",
        )

    def values(self, column: pa.Array | pa.ChunkedArray) -> pa.Array:
        """This term of every row of ``column`` as the server computes it (nulls stay
        null): an integer, a date, a timestamp or the value itself."""
        import pyarrow as pa
        import pyarrow.compute as pc

        array = _combined(column)
        kind = self.type.name
        if self.function == "":
            if kind == "DateTime":
                return _seconds(self._local(array)).cast(pa.timestamp("s"))
            return array
        if self.function == "intDiv":
            # ClickHouse truncates towards zero, as Arrow's integer division does.
            if not (pa.types.is_unsigned_integer(array.type) and self.divisor > 0):
                array = array.cast(pa.int64())
            return pc.divide(array, self.divisor)
        if self.function == "toDate" and kind == "Date32":
            # Date counts days in a UInt16: the server wraps a Date32 outside its range.
            days = pc.bit_wise_and(array.cast(pa.date32()).cast(pa.int32()), 0xFFFF)
            return days.cast(pa.int32()).cast(pa.date32())
        if self.function == "toStartOfHour":
            return self._hours(array)
        local = self._local(array)
        if self.function == "toYYYYMM":
            return pc.add(pc.multiply(pc.year(local), 100), pc.month(local))
        if self.function == "toYYYYMMDD":
            ym = pc.add(pc.multiply(pc.year(local), 100), pc.month(local))
            return pc.add(pc.multiply(ym, 100), pc.day(local))
        return pc.floor_temporal(local, unit="day").cast(pa.timestamp("s")).cast(pa.date32())

    def _hours(self, array: pa.Array) -> pa.Array:
        """``toStartOfHour`` on the local clock: whole hours from the local midnight, but
        from the epoch on a first local day that began before it (the server's date
        table starts at the epoch: in a zone half an hour ahead, 1970-01-01 05:47 becomes
        05:30), as naive local timestamps."""
        import pyarrow as pa
        import pyarrow.compute as pc

        local = _seconds(self._local(array))
        instant = _seconds(self._local(array, zone="UTC"))
        offset = pc.subtract(local, instant)
        floored = pc.multiply(pc.floor(pc.divide(local.cast(pa.float64()), 3600.0)), 3600.0)
        hours = floored.cast(pa.int64())
        midnight = pc.subtract(
            pc.multiply(pc.floor(pc.divide(local.cast(pa.float64()), 86400.0)), 86400.0).cast(
                pa.int64()
            ),
            offset,
        )
        early = pc.add(pc.multiply(pc.divide(instant, 3600), 3600), offset)
        return pc.if_else(pc.less(midnight, 0), early, hours).cast(pa.timestamp("s"))

    def spans(self, column: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """``(end of each row's partition, the row's own time)`` as local wall-clock epoch
        seconds (int64), for a time term; ``late_data`` compares them (B242)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        local = self._local(_combined(column))
        seconds = _seconds(local)
        if self.function == "toStartOfHour":
            start = self._hours(_combined(column)).cast(pa.int64())
            return pc.add(start, 3600), seconds
        if self.function == "toYYYYMM":
            start = pc.floor_temporal(local, unit="month")
            end = pc.ceil_temporal(pc.add(start, pa.scalar(1, pa.duration("s"))), unit="month")
            return end.cast(pa.timestamp("s")).cast(pa.int64()), seconds
        if self.function == "" and self.type.name in ("DateTime", "DateTime64"):
            return pc.add(seconds, 1), seconds
        day = pc.floor_temporal(local, unit="day").cast(pa.timestamp("s")).cast(pa.int64())
        return pc.add(day, _DAY), seconds

    def _local(self, array: pa.Array, zone: str = "") -> pa.Array:
        """The column as naive local wall-clock timestamps in the term's time zone (or
        ``zone``)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        kind = self.type.name
        if pa.types.is_date(array.type):
            return array.cast(pa.date32()).cast(pa.timestamp("s"))
        if pa.types.is_integer(array.type):
            if kind in ("Date", "Date32"):
                return array.cast(pa.int32()).cast(pa.date32()).cast(pa.timestamp("s"))
            unit, scale = _unit(kind, self.type)
            ticks = array.cast(pa.int64())
            if scale != 1:
                ticks = pc.multiply(ticks, scale)
            array = ticks.cast(pa.timestamp(unit))
        if pa.types.is_timestamp(array.type):
            if array.type.tz is None:
                array = array.cast(pa.timestamp(array.type.unit, "UTC"))
            zone = zone or self.timezone
            if zone not in _UTC_NAMES:
                array = array.cast(pa.timestamp(array.type.unit, zone))
            return pc.local_timestamp(array)
        raise TypeError(f"{self.column} ({self.type}) is not a date or time")


def _seconds(timestamps: pa.Array) -> pa.Array:
    """Naive timestamps as whole epoch seconds (int64), floored."""
    import pyarrow as pa
    import pyarrow.compute as pc

    whole = pc.floor_temporal(timestamps, unit="second")
    return whole.cast(pa.timestamp("s")).cast(pa.int64())


def _unit(kind: str, chtype: ChType) -> tuple[str, int]:
    """The Arrow unit of integer ticks of a ``DateTime``/``DateTime64(p)`` column and the
    factor that brings them to it."""
    if kind != "DateTime64":
        return "s", 1
    first = chtype.args[0] if chtype.args else 3
    precision = first if isinstance(first, int) else 3
    for unit, digits in (("s", 0), ("ms", 3), ("us", 6), ("ns", 9)):
        if precision <= digits:
            return unit, 10 ** (digits - precision)
    return "ns", 1


def _combined(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    if isinstance(column, pa.DictionaryArray):
        return column.dictionary_decode()
    return column


@dataclass(frozen=True, slots=True)
class PartitionKey:
    """A table's partition key the client can compute: its terms, in key order."""

    expression: str
    terms: tuple[Term, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the key reads, each once."""
        return tuple(dict.fromkeys(t.column for t in self.terms))

    @property
    def time_term(self) -> Term | None:
        """The first term whose partitions are spans of time (``late_data``), if any."""
        return next((t for t in self.terms if t.is_time), None)

    def ids(self, columns: Mapping[str, pa.Array | pa.ChunkedArray]) -> tuple[pa.Array, int]:
        """``(partition index of each row, number of partitions)``.

        Indexes count the block's distinct partitions in order of first appearance; a
        null is a value of its own, as the server puts it in a partition of its own.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        combined: pa.Array | None = None
        for term in self.terms:
            encoded = pc.dictionary_encode(
                term.values(columns[term.column]), null_encoding="encode"
            )
            indices = encoded.indices.cast(pa.int64())
            size = len(encoded.dictionary)
            combined = indices if combined is None else pc.add(pc.multiply(combined, size), indices)
        if combined is None:
            return pa.array([], pa.int64()), 0
        encoded = pc.dictionary_encode(combined)
        return encoded.indices.cast(pa.int64()), len(encoded.dictionary)


def split_terms(expression: str) -> list[str]:
    """The top-level comma-separated items of ``expression`` (outer tuple removed)."""
    text = expression.strip()
    if text.startswith("tuple(") and text.endswith(")"):
        text = text[len("tuple(") - 1 :]
    if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1]
    items: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        items.append(current.strip())
    return items


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += 1 if char == "(" else -1 if char == ")" else 0
        if depth < 0:
            return False
    return depth == 0


def parse_key(
    expression: str, types: Mapping[str, ChType], server_timezone: str = "UTC"
) -> PartitionKey | None:
    """The key the client can compute, or None for an expression it cannot (the writer
    then splits refused blocks in halves) and for a table without partitions."""
    items = split_terms(expression)
    if not items:
        return None
    terms: list[Term] = []
    for item in items:
        term = _term(item, types, server_timezone)
        if term is None:
            return None
        terms.append(term)
    return PartitionKey(expression.strip(), tuple(terms))


def _term(item: str, types: Mapping[str, ChType], server_timezone: str) -> Term | None:
    function: Function = ""
    divisor = 1
    name_text = item
    call = _CALL.match(item.replace(" ", ""))
    if call is not None:
        function = call.group("fn")  # type: ignore[assignment]
        args = call.group("args").split(",")
        if function == "intDiv":
            if len(args) != 2 or not re.fullmatch(r"-?[0-9]+", args[1]) or int(args[1]) == 0:
                return None
            divisor = int(args[1])
        elif len(args) != 1:
            return None
        name_text = args[0]
    name = _NAME.match(name_text.strip())
    if name is None or name.group("name") not in types:
        return None
    column = name.group("name")
    chtype = _bare(types[column])
    kind = chtype.name
    temporal = kind in ("Date", "Date32", "DateTime", "DateTime64")
    if function in _TIME_FUNCTIONS and not temporal:
        return None
    if function == "intDiv" and not re.fullmatch(r"U?Int(8|16|32|64)", kind):
        return None
    timezone = server_timezone
    if kind == "DateTime" and chtype.args:
        timezone = str(chtype.args[0]).strip("'")
    elif kind == "DateTime64" and len(chtype.args) > 1:
        timezone = str(chtype.args[1]).strip("'")
    return Term(function, column, chtype, divisor, timezone)


def _bare(chtype: ChType) -> ChType:
    while chtype.name in ("Nullable", "LowCardinality") and chtype.args:
        inner = chtype.args[0]
        if not isinstance(inner, ChType):
            break
        chtype = inner
    return chtype


def arrow_column(values: Sequence[object], chtype: ChType) -> pa.Array:
    """A row-path column (the values as the encoder keeps them: ``datetime``, ``date``,
    integer ticks, numbers, strings) as an Arrow array the terms can read."""
    import pyarrow as pa

    kind = _bare(chtype).name
    if kind in ("DateTime", "DateTime64"):
        first = next((v for v in values if v is not None), None)
        if first is not None and not isinstance(first, int):
            return pa.array(values, pa.timestamp("us", "UTC"))
    return pa.array(values)
