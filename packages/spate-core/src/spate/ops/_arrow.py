"""Arrow columns as every consumer reads them: string and binary views made plain.

polars hands Arrow string and binary *views* (``Utf8View``, ``BinaryView``) to the
columnar path; not every writer takes them (ClickHouse before 26.4 rejects them, Parquet
readers differ), so a sink's ``prepare_frame`` casts them to the large offset types,
nested ones included (lists become large lists, struct and map fields are cast in
place). pyarrow is imported on first use: it comes with the columnar extra.
"""

from __future__ import annotations

from typing import Any


def plain_type(t: Any) -> Any:
    """The Arrow type ``t`` with every string/binary view replaced by its large type."""
    import pyarrow as pa

    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.large_list(pa.field(t.value_field.name, plain_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, plain_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(plain_type(t.key_type), plain_type(t.item_type))
    return t


def plain_column(column: Any) -> Any:
    """An Arrow (chunked) array cast to :func:`plain_type` of its type, when that differs."""
    t = plain_type(column.type)
    return column if t == column.type else column.cast(t)


def plain_table(table: Any) -> Any:
    """An Arrow table with every column cast to :func:`plain_type` of its type."""
    import pyarrow as pa

    fields = []
    changed = False
    for field in table.schema:
        t = plain_type(field.type)
        changed = changed or t != field.type
        fields.append(pa.field(field.name, t, field.nullable))
    return table.cast(pa.schema(fields)) if changed else table
