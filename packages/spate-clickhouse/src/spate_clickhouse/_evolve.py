"""``evolve: add_columns``: what a new writer schema asks of the table (B60, B61).

:func:`plan` compares a writer schema's top-level fields (:mod:`spate.schema`, as the Avro
and Protobuf deserializers announce them) with the columns the sink writes and the columns
the table has, and decides:

* a field the table lacks becomes a column: ``Nullable(T)`` when the field may be null or
  has no default, ``T DEFAULT <default>`` when the schema gives one (rows written before
  read that value; rows of older schemas are written with it too);
* a field the table has but the sink does not write yet (added earlier, before a restart)
  is written from now on;
* a field whose type no longer fits its column (a changed type, a field that became
  optional for a column that is not ``Nullable``, an enum symbol the column lacks), a
  renamed field (an Avro field whose ``aliases`` name a column or an earlier field) and
  a field an earlier schema had whose column cannot go without it (not ``Nullable``, no
  default: a removed required field) are refused, each with one clause.

Owns the decision and the ``ALTER TABLE`` text, not the connections
(:mod:`spate_clickhouse._writer` runs it on every replica).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spate.schema import Field, FieldKind

from spate_clickhouse._ddl import DdlError, clickhouse_type, quote_name, sql_value
from spate_clickhouse._encoder import NO_FILL
from spate_clickhouse._types import ChType, EnumItem, parse_type, types_agree
from spate_clickhouse.config import TableOptions

_WIDER = {
    ("Int8", "Int16"),
    ("Int8", "Int32"),
    ("Int8", "Int64"),
    ("Int16", "Int32"),
    ("Int16", "Int64"),
    ("Int32", "Int64"),
    ("UInt8", "UInt16"),
    ("UInt8", "UInt32"),
    ("UInt8", "UInt64"),
    ("UInt16", "UInt32"),
    ("UInt16", "UInt64"),
    ("UInt32", "UInt64"),
    ("UInt32", "Int64"),
    ("Int32", "Float64"),
    ("Float32", "Float64"),
    ("Date", "Date32"),
}
"""(field type, column type) pairs where every value of the field fits the column."""


@dataclass
class Plan:
    """What one new writer schema asks: columns to add, columns to start writing, refusals."""

    add: list[tuple[str, str]] = field(default_factory=list)
    """``(name, column definition)`` for ``ADD COLUMN IF NOT EXISTS``."""
    write: list[str] = field(default_factory=list)
    """Columns the sink writes from now on (added ones and adopted ones), in field order."""
    fills: dict[str, object] = field(default_factory=dict)
    """The value written for a new column in rows that lack the field."""
    problems: list[str] = field(default_factory=list)


def plan(
    fields: Sequence[Field],
    written: Mapping[str, ChType],
    fills: Mapping[str, object],
    table: Mapping[str, ChType],
    seen: set[str],
    options: TableOptions,
) -> Plan:
    """Decide what ``fields`` need: ``written`` are the sink's columns with their types,
    ``fills`` the values of columns rows may lack, ``table`` every column of the table,
    ``seen`` the field names of the schemas met before."""
    result = Plan()
    names = {f.name for f in fields}
    for f in fields:
        column = written.get(f.name) or table.get(f.name)
        if column is not None:
            problem = _misfit(f, column, options)
            if problem is not None:
                result.problems.append(problem)
            elif f.name not in written:
                result.write.append(f.name)
                result.fills[f.name] = _fill(f)
            continue
        renamed = [a for a in f.aliases if a in written or a in table or a in seen]
        if renamed:
            result.problems.append(
                f"field {f.name} renames {renamed[0]}: rename column {renamed[0]} by hand "
                "(ClickHouse would keep the old rows under the old name)"
            )
            continue
        try:
            definition, fill = _new_column(f, options)
        except DdlError as exc:
            result.problems.append(f"field {f.name} cannot become a column: {exc}")
            continue
        result.add.append((f.name, definition))
        result.write.append(f.name)
        result.fills[f.name] = fill
    for name in sorted(seen & set(written) - names):
        column = written[name]
        if not column.nullable and fills.get(name, NO_FILL) is NO_FILL:
            result.problems.append(
                f"field {name} was removed or renamed, but column {name} is {column}, "
                "not Nullable and without a default"
            )
    return result


def alter_sql(table: str, additions: Sequence[tuple[str, str]], on_cluster: str = "") -> str:
    """``ALTER TABLE table [ON CLUSTER c] ADD COLUMN IF NOT EXISTS …`` for ``additions``."""
    cluster = f" ON CLUSTER {quote_name(on_cluster)}" if on_cluster else ""
    adds = ", ".join(
        f"ADD COLUMN IF NOT EXISTS {quote_name(name)} {definition}"
        for name, definition in additions
    )
    return f"ALTER TABLE {table}{cluster} {adds}"


def _new_column(f: Field, options: TableOptions) -> tuple[str, object]:
    """The column definition of a new field and the value rows without it are written with."""
    t = f.type
    if t.kind is FieldKind.RECORD:
        raise DdlError("a record field would be a Tuple, which cannot be Nullable; add it by hand")
    if t.kind in (FieldKind.ARRAY, FieldKind.MAP):
        empty: object = [] if t.kind is FieldKind.ARRAY else {}
        return clickhouse_type(t, options), empty
    if t.nullable:
        return clickhouse_type(t, options), None
    if f.has_default and isinstance(f.default, str | int | float | bool):
        return f"{clickhouse_type(t, options)} DEFAULT {sql_value(f.default)}", f.default
    return clickhouse_type(t.with_nullable(), options), None


def _fill(f: Field) -> object:
    if f.has_default and isinstance(f.default, str | int | float | bool | None):
        return f.default
    return None if f.type.nullable else NO_FILL


def _misfit(f: Field, column: ChType, options: TableOptions) -> str | None:
    """Why field ``f`` cannot be written to ``column`` (None: it can)."""
    try:
        mapped = parse_type(clickhouse_type(f.type, options))
    except (DdlError, ValueError) as exc:
        return f"field {f.name} has no column type ({exc}), column {f.name} is {column}"
    if mapped.nullable and not column.nullable:
        return f"field {f.name} may now be null, but column {f.name} is {column}, not Nullable"
    theirs, mine = column.unwrapped(), mapped.unwrapped()
    if types_agree(mine, theirs) or (mine.name, theirs.name) in _WIDER:
        return None
    if f.type.kind is FieldKind.ENUM:
        if theirs.name == "String":
            return None
        if theirs.name in ("Enum8", "Enum16"):
            known = {a.name for a in theirs.args if isinstance(a, EnumItem)}
            missing = [s for s in f.type.symbols if s not in known]
            if not missing:
                return None
            return (
                f"enum field {f.name} has symbols {', '.join(missing)} that column "
                f"{f.name} ({column}) lacks"
            )
    return f"field {f.name} changed type: it is now {mapped}, column {f.name} is {column}"
