"""Arrow schemas from config, and the per-row check that keeps a bad row out of a file.

A declared schema (``schema: {id: int64, ...}``) is parsed once; each row (a dict, or
a tuple in the declared column order) is checked on offer against the Python types
each Arrow type accepts, so one bad value is refused with ``SinkError(RECORD)`` (B28)
instead of failing a whole file when it is encoded. Without a declared schema rows must
be dicts; their column set is the row's *shape*, and a new shape opens a new file.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import cast

import pyarrow as pa
from spate.errors import ErrorClass, SinkError


class SchemaError(ValueError):
    """A declared schema that cannot be parsed."""


_SIMPLE: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
}
for _unit in ("s", "ms", "us", "ns"):
    _SIMPLE[f"timestamp[{_unit}]"] = pa.timestamp(_unit)
    _SIMPLE[f"timestamp[{_unit}, tz=UTC]"] = pa.timestamp(_unit, tz="UTC")


def parse_type(text: str) -> pa.DataType:
    """One Arrow type from its config spelling."""
    found = _SIMPLE.get(text.strip())
    if found is None:
        raise SchemaError(f"unknown Arrow type {text!r} (one of {', '.join(sorted(_SIMPLE))})")
    return found


def parse_schema(declared: Mapping[str, str]) -> pa.Schema | None:
    """The declared schema, or ``None`` when nothing is declared (inferred per file)."""
    if not declared:
        return None
    return pa.schema([pa.field(name, parse_type(text)) for name, text in declared.items()])


def _accepts(kind: pa.DataType) -> tuple[type, ...]:
    if pa.types.is_boolean(kind):
        return (bool,)
    if pa.types.is_integer(kind):
        return (int,)
    if pa.types.is_floating(kind):
        return (float, int)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return (str,)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return (bytes, bytearray)
    if pa.types.is_timestamp(kind):
        return (dt.datetime, int)
    if pa.types.is_date32(kind):
        return (dt.date,)
    return (object, decimal.Decimal)


class RowShaper:
    """Turns an offered row into the dict a file holds, or refuses it (B28).

    Called on the pipeline thread for every row; never blocks. The common case — every
    value of exactly a type its column takes — costs one set lookup per value.
    """

    __slots__ = ("_accepts", "_exact", "_fits", "_names", "schema")

    def __init__(self, schema: pa.Schema | None) -> None:
        self.schema = schema
        self._names: tuple[str, ...] = tuple(schema.names) if schema is not None else ()
        self._accepts = (
            {f.name: (_accepts(f.type), f.type) for f in schema} if schema is not None else {}
        )
        self._exact: dict[str, frozenset[type]] = {
            name: frozenset(
                k for k in (*kinds, type(None)) if not (k is int and pa.types.is_boolean(arrow))
            )
            - ({bool} if not pa.types.is_boolean(arrow) else set())
            for name, (kinds, arrow) in self._accepts.items()
        }
        self._fits: set[tuple[tuple[str, ...], tuple[type, ...]]] = set()
        """(columns, value types) of rows already checked and found to fit."""

    def shape(self, row: object) -> dict[str, object]:
        """The row as a dict of column -> value; raise ``SinkError(RECORD)`` if it cannot fit."""
        if type(row) is dict:
            values: dict[str, object] = row
        elif isinstance(row, dict):
            values = row
        elif isinstance(row, tuple | list) and self._names:
            if len(row) != len(self._names):
                raise SinkError(
                    f"row has {len(row)} values, the schema {len(self._names)} columns",
                    ErrorClass.RECORD,
                )
            values = dict(zip(self._names, row, strict=True))
        else:
            raise SinkError(
                f"parquet rows are dicts (or tuples with a declared schema), got "
                f"{type(row).__name__}",
                ErrorClass.RECORD,
            )
        if not self._names:
            for name in values:
                if type(name) is not str:
                    raise SinkError(f"column names are strings, got {name!r}", ErrorClass.RECORD)
            return values
        signature = (tuple(values), tuple(map(type, values.values())))
        if signature in self._fits:
            return values
        exact = self._exact
        for name, value in values.items():
            kinds = exact.get(name)
            if kinds is None or type(value) not in kinds:
                self._check(name, value)
                return values  # fits, but only as a subclass: not remembered
        if len(self._fits) < 4096:
            self._fits.add(signature)
        return values

    def _check(self, name: str, value: object) -> None:
        """The slow path: subclasses are fine, anything else is refused."""
        spec = self._accepts.get(name)
        if spec is None:
            raise SinkError(f"column {name!r} is not in the schema", ErrorClass.RECORD)
        kinds, arrow = spec
        if not isinstance(value, kinds) or (
            isinstance(value, bool) and not pa.types.is_boolean(arrow)
        ):
            raise SinkError(
                f"column {name!r}: {type(value).__name__} value {value!r} does not fit {arrow}",
                ErrorClass.RECORD,
            )

    def table(
        self, rows: Sequence[object]
    ) -> tuple[pa.Table, Sequence[int], list[tuple[int, str]]]:
        """A batch of rows as one Arrow table in the declared schema, checked per column.

        Returns the table of the rows that fit, each one's index in ``rows`` (a range
        when all fit), and the rows :meth:`shape` would refuse, as ``(index, reason)``.
        The common case (dicts holding exactly the declared columns, every value of a
        type its column takes) costs a few C-level passes per column and no Python code
        per row; anything else is checked row by row. A value of the right type that its
        column still cannot hold (an int beyond int32) is refused too, where the row path
        would fail the whole file.
        """
        schema = self.schema
        if schema is None:
            raise ValueError("a batch of rows needs a declared schema")
        names = self._names
        columns = self._fast_columns(rows)
        bad: dict[int, str] = {}
        index: Sequence[int]
        if columns is None:
            kept: list[Mapping[str, object]] = []
            positions: list[int] = []
            for i, row in enumerate(rows):
                try:
                    kept.append(self.shape(row))
                except SinkError as exc:
                    bad[i] = exc.reason
                    continue
                positions.append(i)
            columns = [[row.get(name) for row in kept] for name in names]
            index = positions
        else:
            index = range(len(rows))
        arrays = []
        for field, values in zip(schema, columns, strict=True):
            try:
                arrays.append(to_array(values, field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
                arrays.append(_each(values, field, index, bad))
        out = pa.Table.from_arrays(arrays, schema=schema)
        if len(bad) > len(rows) - len(index):  # values refused while building
            keep = pa.array([i not in bad for i in index], type=pa.bool_())
            out = out.filter(keep)
            index = [i for i in index if i not in bad]
        return out, index, sorted(bad.items())

    def _fast_columns(self, rows: Sequence[object]) -> list[list[object]] | None:
        """The declared columns of ``rows`` when every row is a dict of exactly those
        columns with values of exactly the types they take; else None."""
        names = self._names
        if not rows or set(map(type, rows)) != {dict}:
            return None
        dicts = cast("Sequence[dict[str, object]]", rows)
        if set(map(len, dicts)) != {len(names)}:
            return None
        try:
            columns = [list(map(operator.itemgetter(name), dicts)) for name in names]
        except KeyError:
            return None
        exact = self._exact
        for name, values in zip(names, columns, strict=True):
            if not set(map(type, values)) <= exact[name]:
                return None
        return columns

    def shape_key(self, values: Mapping[str, object]) -> tuple[str, ...]:
        """The row's shape: its column set when inferring, () with a declared schema."""
        if self._names:
            return ()
        return tuple(values)


def _each(
    values: list[object], field: pa.Field, index: Sequence[int], bad: dict[int, str]
) -> pa.Array:
    """The slow path of a column holding a value it cannot take: value by value."""
    out: list[object] = []
    for position, value in zip(index, values, strict=True):
        try:
            pa.array([value], type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            bad.setdefault(
                position, f"column {field.name!r}: value {value!r} does not fit {field.type}"
            )
            value = None
        out.append(value)
    return pa.array(out, type=field.type)


_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH = dt.datetime(1970, 1, 1)


def to_array(
    values: list[object], kind: pa.DataType, types: frozenset[type] | set[type] | None = None
) -> pa.Array:
    """``pa.array(values, type=kind)``: the same array, faster for timestamps.

    pyarrow asks every aware datetime for its UTC offset through Python; a column of
    datetimes that all share ``datetime.UTC`` (or are all naive) is converted instead as
    their distances from the epoch (one C-level subtraction each, no offset lookup),
    which pyarrow floors to the unit exactly as it floors datetimes. ``types``: the
    values' types when the caller already knows them.
    """
    if pa.types.is_timestamp(kind) and values:
        if types is None:
            types = set(map(type, values))
        if types == {dt.datetime}:
            zones = set(map(operator.attrgetter("tzinfo"), values))
            epoch = _EPOCH_UTC if zones == {dt.UTC} else _EPOCH if zones == {None} else None
            if epoch is not None:
                deltas = list(map(operator.sub, values, itertools.repeat(epoch)))
                return pa.array(deltas, type=pa.duration(kind.unit)).view(kind)
    return pa.array(values, type=kind)
