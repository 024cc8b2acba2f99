"""``JSON``, ``Variant`` and ``Dynamic`` columns: the checks, written forms and wire types.

clickhouse-connect gets these types wrong in ways that lose data or whole blocks: a
``Variant`` holding ``String`` stored every value as text (its issue #534, up to the
release that writes Variants natively), a value whose Python type maps to two members or
to none fails the whole block, a ``Dynamic`` column is sent as text (``7`` is stored as
the String ``'7'`` and NULL as the String ``'NULL'``), and the JSON writer picks text or
objects from the first value of the block (its issue #409 and kin). So spate decides each
value itself, when the row is appended, and sends what it decided:

* ``JSON(...)``: a mapping (or text or bytes holding a JSON object) is checked — each
  typed path's value by its type's coercer (B28 rules: ``"12"`` into an ``Int32`` path is
  12, ``"abc"`` a record error), a skipped path is dropped — and written as the object's
  JSON text, which the server parses into its paths (one form for every value, so the
  first value decides nothing).
* ``Variant(T1, …)``: the value goes to the first member that takes it, members of its
  own Python kind first (an ``int`` to the narrowest integer member that holds it, a
  ``str`` to ``String``, a ``bool`` to ``Bool``…), then the others in the server's
  order; the written form is clickhouse-connect's ``TypedVariant`` (value, member), so
  the member is sent explicitly. A value no member takes is a record error for its
  record alone.
* ``Dynamic``: the value's own type decides (``bool`` Bool, ``int`` Int64 or UInt64,
  ``float`` Float64, ``str``/UTF-8 bytes String, ``date`` Date32, ``datetime``
  DateTime64(6, 'UTC'), ``UUID`` its text, a list of scalars ``Array(Nullable(T))`` or,
  mixed, ``Array(Variant(Bool, Float64, Int64, String))``); a mapping, a ``Decimal`` or a
  nested list is a record error. The column is sent as :data:`DYNAMIC_WIRE` (a Variant of
  those types), which the server casts into the ``Dynamic`` keeping each value's type.

On the columnar path (:mod:`spate_clickhouse._arrowvalues`) the same coercers decide
each value, and a ``Variant`` or ``Dynamic`` column is sent as an Arrow dense union with a
child per member (ClickHouse reads a union into these columns by member; a plain Arrow
column with nulls would store them as zeros), a ``JSON`` column as the JSON text.

Upholds B310-B316.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from spate_clickhouse._types import ChType, parse_type

Coercer = Callable[[object], object]

DYNAMIC_WIRE = (
    "Variant(Array(Nullable(Bool)), Array(Nullable(Float64)), Array(Nullable(Int64)), "
    "Array(Nullable(String)), Array(Variant(Bool, Float64, Int64, String)), Bool, Date32, "
    "DateTime64(6, 'UTC'), Float64, Int64, String, UInt64)"
)
"""The type a ``Dynamic`` column is sent as (the server casts it, keeping each type)."""

_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1
_MIXED = "Array(Variant(Bool, Float64, Int64, String))"
_ELEMENT = {bool: "Bool", int: "Int64", float: "Float64", str: "String"}


def typed_variant_class() -> Any:
    """clickhouse-connect's ``TypedVariant`` (the explicit member of a Variant value)."""
    try:
        from clickhouse_connect.datatypes.dynamic import TypedVariant
    except ImportError:  # pragma: no cover - releases before the native Variant writer
        from spate.errors import ErrorClass, SinkError

        raise SinkError(
            "Variant and Dynamic columns need a clickhouse-connect that writes Variants "
            "natively (typed_variant); upgrade clickhouse-connect",
            ErrorClass.FATAL,
        ) from None
    return TypedVariant


def has_semistructured(t: ChType) -> bool:
    """Whether ``t`` is or holds a ``JSON``, ``Variant`` or ``Dynamic`` type."""
    if t.name in ("JSON", "Variant", "Dynamic"):
        return True
    return any(has_semistructured(a) for a in t.type_args())


def wire_type(t: ChType) -> str:
    """The type name a column of type ``t`` is sent as on the row path (``Dynamic``,
    at any depth, as :data:`DYNAMIC_WIRE`)."""
    if t.name == "Dynamic":
        prefix = f"{t.field} " if t.field is not None else ""
        return prefix + DYNAMIC_WIRE
    if not any(isinstance(a, ChType) and "Dynamic" in str(a) for a in t.args):
        return str(t)
    parts = [wire_type(a) if isinstance(a, ChType) else str(a) for a in t.args]
    prefix = f"{t.field} " if t.field is not None else ""
    return f"{prefix}{t.name}({', '.join(parts)})"


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


# -- JSON -----------------------------------------------------------------------------------


def _json_default(value: object) -> object:
    """JSON text of the values ``json`` does not know (written forms of typed paths)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("bytes that are not UTF-8 have no JSON form") from None
    if isinstance(value, tuple):
        return list(value)
    raise ValueError(f"{_describe(value)} has no JSON form")


def _path(field: str) -> tuple[str, ...]:
    """The keys of a typed or skipped path (the server quotes ``a.b`` as `` `a.b` ``)."""
    if field.startswith("`") and field.endswith("`"):
        field = field[1:-1].replace("\\`", "`")
    return tuple(field.split("."))


def json_coercer(
    t: ChType, coercer_for: Callable[[ChType], Coercer], bad: type[ValueError]
) -> Coercer:
    """The coercer of a ``JSON(...)`` column: a JSON object's text (see the module)."""
    typed: list[tuple[tuple[str, ...], ChType, Coercer]] = []
    skipped: list[tuple[str, ...]] = []
    for arg in t.type_args():
        if arg.field == "SKIP":
            if not arg.name.upper().startswith("REGEXP"):
                skipped.append(_path(arg.name))
        elif arg.field is not None and not arg.field.endswith("="):
            typed.append((_path(arg.field), arg, coercer_for(arg)))

    def coerce(value: object) -> object:
        if isinstance(value, (str, bytes, bytearray, memoryview)):
            try:
                value = json.loads(bytes(value) if not isinstance(value, str) else value)
            except ValueError:
                raise bad(f"expected a JSON object, got {_describe(value)}") from None
        if not isinstance(value, Mapping):
            raise bad(f"expected a JSON object (a mapping), got {_describe(value)}")
        obj: dict[str, Any] = {str(k): v for k, v in value.items()}
        for path in skipped:
            _pop(obj, path)
        for path, path_type, check in typed:
            found, current = _get(obj, path)
            if not found:
                continue
            if current is None and not path_type.nullable:
                _pop(obj, path)  # the server stores the type's default, as for an absent path
                continue
            try:
                written = check(current)
            except bad as exc:
                shown = ChType(path_type.name, path_type.args)
                raise bad(f"path {'.'.join(path)} ({shown}): {exc}") from None
            _set(obj, path, written)
        try:
            return json.dumps(obj, default=_json_default, ensure_ascii=False, allow_nan=False)
        except ValueError as exc:
            raise bad(f"cannot be written as JSON: {exc}") from None

    return coerce


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    if len(path) > 1 and ".".join(path) in obj:
        return True, obj[".".join(path)]
    current: Any = obj
    for key in path:
        if not isinstance(current, Mapping) or key not in current:
            return False, None
        current = current[key]
    return True, current


def _set(obj: dict[str, Any], path: tuple[str, ...], value: object) -> None:
    if len(path) > 1 and ".".join(path) in obj:
        obj[".".join(path)] = value
        return
    current = obj
    for key in path[:-1]:
        child = current[key]
        if not isinstance(child, dict):
            child = dict(child)
        current[key] = child
        current = child
    current[path[-1]] = value


def _pop(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    if len(path) > 1 and ".".join(path) in obj:
        del obj[".".join(path)]
    found, _ = _get(obj, path[:-1]) if len(path) > 1 else (True, obj)
    if not found:
        return
    parent = obj
    for key in path[:-1]:
        child = parent[key]
        if not isinstance(child, Mapping):
            return
        if not isinstance(child, dict):
            child = dict(child)
            parent[key] = child
        parent = child
    parent.pop(path[-1], None)


# -- Variant --------------------------------------------------------------------------------

_NATURAL: dict[str, tuple[type, ...]] = {
    "Float32": (float,),
    "Float64": (float,),
    "BFloat16": (float,),
    "Decimal": (decimal.Decimal,),
    "String": (str, bytes, bytearray, memoryview),
    "FixedString": (bytes, bytearray, memoryview),
    "Bool": (bool,),
    "Date": (dt.date,),
    "Date32": (dt.date,),
    "DateTime": (dt.datetime,),
    "DateTime64": (dt.datetime,),
    "UUID": (uuid.UUID,),
    "Array": (list, tuple),
    "Tuple": (list, tuple, dict),
    "Map": (dict,),
}


def _natural(member: ChType, int_ranges: Mapping[str, tuple[int, int]]) -> tuple[type, ...]:
    if member.name in int_ranges:
        return (int,)
    return _NATURAL.get(member.name, ())


def _rank(member: ChType, int_ranges: Mapping[str, tuple[int, int]]) -> tuple[int, str]:
    """Members of one kind: the narrowest integer first, Float64 before Float32."""
    if member.name in int_ranges:
        lo, hi = int_ranges[member.name]
        return hi - lo, member.name
    if member.name == "Float32":
        return 1, member.name
    return 0, member.name


@cache
def client_name(t: ChType) -> str:
    """clickhouse-connect's name of a type (how its Variant writer names a member)."""
    from clickhouse_connect.datatypes.registry import get_from_name

    return str(get_from_name(str(t)).name)


def variant_coercer(
    t: ChType,
    coercer_for: Callable[[ChType], Coercer],
    bad: type[ValueError],
    int_ranges: Mapping[str, tuple[int, int]],
) -> Coercer:
    """The coercer of a ``Variant(...)`` column (see the module): ``None`` or a
    ``TypedVariant`` of the member's written form and its name."""
    typed = typed_variant_class()
    members = t.type_args()
    entries = [(coercer_for(m), client_name(m)) for m in members]
    by_kind: dict[type, list[int]] = {}
    for i, member in sorted(enumerate(members), key=lambda im: _rank(im[1], int_ranges)):
        for kind in _natural(member, int_ranges):
            by_kind.setdefault(kind, []).append(i)
    orders: dict[type, list[int]] = {}
    label = str(t)

    def order(cls: type) -> list[int]:
        found = orders.get(cls)
        if found is None:
            first: list[int] = []
            for base in cls.__mro__:
                if base in by_kind:
                    first = by_kind[base]
                    break
            found = first + [i for i in range(len(members)) if i not in first]
            orders[cls] = found
        return found

    def coerce(value: object) -> object:
        if value is None:
            return None
        reasons: list[str] = []
        for i in order(value.__class__):
            check, name = entries[i]
            try:
                return typed(check(value), name)
            except bad as exc:
                reasons.append(f"{members[i]}: {exc}")
        raise bad(f"{_describe(value)} fits none of {label}'s types ({'; '.join(reasons)})")

    return coerce


# -- Dynamic --------------------------------------------------------------------------------


def dynamic_coercer(bad: type[ValueError], date32: Coercer) -> Coercer:
    """The coercer of a ``Dynamic`` column (see the module): ``None`` or a
    ``TypedVariant`` naming one of :data:`DYNAMIC_WIRE`'s types."""
    typed = typed_variant_class()

    def scalar(value: object) -> tuple[object, str]:
        cls = value.__class__
        if cls is bool:
            return value, "Bool"
        if cls is float:
            return value, "Float64"
        if cls is str:
            return value, "String"
        if isinstance(value, bool):
            return bool(value), "Bool"
        if isinstance(value, int):
            number = int(value)
            if _INT64[0] <= number <= _INT64[1]:
                return number, "Int64"
            if 0 <= number <= _UINT64_MAX:
                return number, "UInt64"
            raise bad(f"{number} is out of range for Int64 and UInt64")
        if isinstance(value, float):
            return float(value), "Float64"
        if isinstance(value, str):
            return str(value), "String"
        if isinstance(value, (bytes, bytearray, memoryview)):
            try:
                return bytes(value).decode("utf-8"), "String"
            except UnicodeDecodeError:
                raise bad("bytes that are not UTF-8 in a Dynamic column") from None
        if isinstance(value, dt.datetime):
            moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
            return moment, "DateTime64(6, 'UTC')"
        if isinstance(value, dt.date):
            return date32(value), "Date32"
        if isinstance(value, uuid.UUID):
            return str(value), "String"
        if isinstance(value, Mapping):
            raise bad(f"{_describe(value)}: an object goes into a JSON column, not a Dynamic one")
        raise bad(f"{_describe(value)} has no Dynamic type here")

    def array(values: list[object] | tuple[object, ...]) -> tuple[object, str]:
        kinds: set[type] = set()
        for v in values:
            if v is None:
                continue
            kind = v.__class__
            if kind not in _ELEMENT:
                raise bad(f"{_describe(v)} in a list: a Dynamic list holds bool, int, float, str")
            if kind is int and not _INT64[0] <= v <= _INT64[1]:  # type: ignore[operator]
                raise bad(f"{v} in a list is out of range for Int64")
            kinds.add(kind)
        if len(kinds) <= 1:
            element = _ELEMENT[kinds.pop()] if kinds else "String"
            return list(values), f"Array(Nullable({element}))"
        return [None if v is None else typed(v, _ELEMENT[v.__class__]) for v in values], _MIXED

    def coerce(value: object) -> object:
        if value is None:
            return None
        if isinstance(value, (list, tuple)):
            written, name = array(value)
        else:
            written, name = scalar(value)
        return typed(written, name)

    return coerce


@cache
def dynamic_members() -> tuple[ChType, ...]:
    """The member types of :data:`DYNAMIC_WIRE`, in the server's order."""
    return parse_type(DYNAMIC_WIRE).type_args()
