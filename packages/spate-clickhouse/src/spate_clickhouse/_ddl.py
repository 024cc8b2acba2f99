"""``CREATE TABLE`` for a ClickHouse sink, from its columns and the records' schema.

Owns the type mapping from spate's neutral record description (:mod:`spate.schema`, which
the Avro and Protobuf deserializers produce) to ClickHouse types, and the statement
built from the sink's ``columns`` and ``table_options``. Used at start-up by
``create_table: if_missing`` (on every replica, before the B20 check) and by
``spate schema ddl``. A column with a declared type keeps it; any other column takes the
type of the record field of the same name; a column with neither fails with one line
naming it (B59, B29). A metadata column (``{name: $source}``) takes its kind's type (B254).
"""

from __future__ import annotations

from collections.abc import Sequence

from spate.schema import Field, FieldKind, FieldType

from spate_clickhouse._meta import created_type
from spate_clickhouse.config import ClickHouseSinkConfig, TableOptions


class DdlError(ValueError):
    """A column whose type cannot be derived; the message names it."""


_SCALARS = {
    FieldKind.BOOL: "Bool",
    FieldKind.INT32: "Int32",
    FieldKind.INT64: "Int64",
    FieldKind.UINT32: "UInt32",
    FieldKind.UINT64: "UInt64",
    FieldKind.FLOAT32: "Float32",
    FieldKind.FLOAT64: "Float64",
    FieldKind.DATE: "Date32",
    FieldKind.TIMESTAMP_MILLIS: "DateTime64(3, 'UTC')",
    FieldKind.TIMESTAMP_MICROS: "DateTime64(6, 'UTC')",
    FieldKind.UUID: "UUID",
}


def quote_name(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def clickhouse_type(t: FieldType, options: TableOptions, *, nested: bool = False) -> str:
    """The ClickHouse type for ``t``; raises ``DdlError`` for kinds without one."""
    base = _base_type(t, options)
    if not t.nullable or t.kind in (FieldKind.ARRAY, FieldKind.MAP, FieldKind.RECORD):
        if t.nullable and t.kind is FieldKind.RECORD:
            raise DdlError("an optional record has no ClickHouse type (Tuple cannot be Nullable)")
        return base
    if base.startswith("LowCardinality("):
        return f"LowCardinality(Nullable({base[len('LowCardinality(') : -1]}))"
    return f"Nullable({base})"


def _base_type(t: FieldType, options: TableOptions) -> str:
    scalar = _SCALARS.get(t.kind)
    if scalar is not None:
        return scalar
    if t.kind is FieldKind.STRING:
        return "LowCardinality(String)" if options.strings == "low_cardinality" else "String"
    if t.kind is FieldKind.BYTES:
        return f"FixedString({t.precision})" if t.precision else "String"
    if t.kind is FieldKind.DECIMAL:
        if not 1 <= t.precision <= 76:
            raise DdlError(f"decimal precision {t.precision} is outside 1..76")
        return f"Decimal({t.precision}, {t.scale})"
    if t.kind is FieldKind.ENUM:
        if options.enums == "low_cardinality":
            return "LowCardinality(String)"
        numbers = t.numbers or tuple(range(len(t.symbols)))
        width = 8 if all(-128 <= n <= 127 for n in numbers) else 16
        pairs = ", ".join(f"{_string(s)} = {n}" for s, n in zip(t.symbols, numbers, strict=True))
        return f"Enum{width}({pairs})"
    if t.kind is FieldKind.ARRAY and t.items is not None:
        return f"Array({clickhouse_type(t.items, options, nested=True)})"
    if t.kind is FieldKind.MAP and t.items is not None:
        return f"Map(String, {clickhouse_type(t.items, options, nested=True)})"
    if t.kind is FieldKind.RECORD:
        if not t.fields:
            raise DdlError(f"record {t.name or ''} has no fields".replace("  ", " "))
        parts = ", ".join(
            f"{quote_name(f.name)} {clickhouse_type(f.type, options, nested=True)}"
            for f in t.fields
        )
        return f"Tuple({parts})"
    raise DdlError(f"a {t.kind.value} value has no ClickHouse type spate maps it to")


def table_columns(
    config: ClickHouseSinkConfig, fields: Sequence[Field] | None
) -> list[tuple[str, str]]:
    """``(name, type)`` of each sink column, declared or derived from ``fields``."""
    by_name = {f.name: f for f in fields or ()}
    options = config.table_options
    columns: list[tuple[str, str]] = []
    for spec, entry in zip(config.column_specs, config.columns, strict=True):
        if spec.meta is not None:
            columns.append((spec.name, created_type(spec.meta)))
            continue
        if isinstance(entry, dict):
            ((_, declared),) = entry.items()
            columns.append((spec.name, declared))
            continue
        field = by_name.get(spec.name)
        if field is None:
            known = (
                "the deserializer does not describe its records"
                if fields is None
                else (f"the records have no field {spec.name!r}")
            )
            raise DdlError(
                f"column {spec.name}: {known}; declare its type as {{{spec.name}: Type}}"
            )
        try:
            columns.append((spec.name, clickhouse_type(field.type, options)))
        except DdlError as exc:
            raise DdlError(f"column {spec.name}: {exc}; declare its type") from None
    return columns


def create_table_sql(config: ClickHouseSinkConfig, fields: Sequence[Field] | None) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` statement for the sink's table."""
    options = config.table_options
    columns = table_columns(config, fields)
    table = quote_name(config.table_name)
    if config.database_name:
        table = f"{quote_name(config.database_name)}.{table}"
    lines = [f"CREATE TABLE IF NOT EXISTS {table}"]
    if options.on_cluster:
        lines[0] += f" ON CLUSTER {quote_name(options.on_cluster)}"
    width = max(len(quote_name(name)) for name, _ in columns)
    body = ",\n".join(f"    {quote_name(name).ljust(width)} {type_}" for name, type_ in columns)
    lines += ["(", body, ")", f"ENGINE = {options.engine}"]
    if options.partition_by:
        lines.append(f"PARTITION BY {options.partition_by}")
    order_by = options.order_by or (columns[0][0],)
    lines.append(f"ORDER BY ({', '.join(quote_name(c) for c in order_by)})")
    if options.ttl:
        lines.append(f"TTL {options.ttl}")
    settings = dict(options.settings)
    if options.dedup_window and "MergeTree" in options.engine:
        key = (
            "replicated_deduplication_window"
            if options.engine.startswith("Replicated")
            else "non_replicated_deduplication_window"
        )
        settings.setdefault(key, options.dedup_window)
    if settings:
        lines.append("SETTINGS " + ", ".join(f"{k} = {sql_value(v)}" for k, v in settings.items()))
    return "\n".join(lines)


def sql_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    return _string(str(value))
