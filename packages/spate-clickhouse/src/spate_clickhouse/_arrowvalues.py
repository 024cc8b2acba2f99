"""Arrow values into ClickHouse columns exactly as the row path's coercers take them (B87).

:func:`convert_column` turns one Arrow array into the Arrow type ClickHouse reads into the
column as the row path writes it (:func:`arrow_type`), with pyarrow.compute kernels over
the whole array, and flags the rows whose value it cannot vouch for: a value of another
kind than the column's (a string into an ``Int64``, a float into a ``Bool``), one out of
range, a float with a fraction into an integer or with more places than a ``Decimal``'s
scale, a text that is no plain number, date or time. Only those rows are then decided
one at a time by the row path's own coercer (:func:`spate_clickhouse._coerce.coercer_for`):
what it refuses is a record error for that row with the row path's reason; what it
accepts is converted to the column's Arrow type from the coercer's written form, so a
flagged row is stored as the row path stores it. The vectorized checks therefore only
decide which rows are easy; they never decide what a value means.

Pairs and what the kernels do (everything else is flagged):

==========================  ====================================================
integer columns             integers in range; integral floats in range; booleans;
                            text of at most 18 ASCII digits (with a ``-``);
                            ``(U)Int128/256`` as little-endian fixed-size binary
``Float32/64``              floats (Float32: finite ones up to its largest), integers,
                            booleans, plain decimal text
``Decimal(P, S)``           integers and floats that have at most S places (the
                            shortest repr, as ``Decimal(repr(x))``) and fit; decimals
                            the safe Arrow cast takes
``String``                  text; bytes (kept as bytes, as the row path sends them)
``FixedString(N)``          text or bytes of exactly N bytes
``Date``/``Date32``         dates and integer days in range; ``YYYY-MM-DD…`` text
``DateTime``/``DateTime64`` timestamps (naive ones are UTC), dates, integers
                            (seconds; ticks of 10^-p s), floats (``DateTime``:
                            seconds, floored), ISO text with or without an offset
``UUID``                    canonical text; ``Bool``: booleans, 0/1, the texts
                            ``true``/``false``/``1``/``0``; ``Enum``: names, values
``Array``/``Map``/``Tuple``  element by element (a parent row is flagged when an
                            element is); an object's fields into a ``Map``
``JSON``/``Variant``/       every value by the row path's coercer; a Variant or
``Dynamic``                 Dynamic as a dense union, JSON as its text (B315)
==========================  ====================================================

Upholds B28 (a value the row path refuses is a record error for its row alone) and B87
(a value it accepts is stored as on the row path).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

from spate.errors import ErrorClass, SinkError

from spate_clickhouse._coerce import (
    DATE32_RANGE,
    DATE_RANGE,
    DATETIME64_SECONDS,
    DATETIME_RANGE,
    EPOCH,
    F32_MAX,
    INT_RANGES,
    BadValue,
    coercer_for,
)
from spate_clickhouse._semistructured import client_name, dynamic_members, has_semistructured
from spate_clickhouse._types import ChType, EnumItem

_INT_TYPES = {
    "Int8": "int8",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "UInt8": "uint8",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
}
_WIDE_INTS = {
    "Int128": (16, True),
    "Int256": (32, True),
    "UInt128": (16, False),
    "UInt256": (32, False),
}
"""Integers wider than Arrow's: their width in bytes and whether they are signed. They
are sent as fixed-size binary, little-endian two's complement, which ClickHouse reads
into these columns exactly."""
_INT_TEXT = r"^-?[0-9]{1,18}$"
_FLOAT_TEXT = r"^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]{1,3})?$"
_DATE_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
_UUID_TEXT = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_TIME_TEXT = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?)?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?$"
)
_ZONED_TEXT = r"(Z|[+-][0-9]{2}:[0-9]{2})$"


def _precision(t: ChType) -> int:
    return next((a for a in t.args if isinstance(a, int)), 3)


def _time_unit(precision: int) -> tuple[str, int]:
    """The Arrow unit a ``DateTime64(precision)`` is sent in and its decimal digits."""
    if precision == 0:
        return "s", 0
    if precision <= 3:
        return "ms", 3
    if precision <= 6:
        return "us", 6
    return "ns", 9


def arrow_type(t: ChType) -> Any:
    """The Arrow type ``t``'s values are sent in, or None (sent as they come, unchecked)."""
    import pyarrow as pa

    u = t.unwrapped()
    name = u.name
    if name in _INT_TYPES:
        return getattr(pa, _INT_TYPES[name])()
    if name in _WIDE_INTS:
        return pa.binary(_WIDE_INTS[name][0])
    if name in ("Float32", "BFloat16"):
        return pa.float32()
    if name == "Float64":
        return pa.float64()
    if name == "Decimal":
        precision, scale = (a for a in u.args if isinstance(a, int))
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
    if name in ("String", "UUID", "Enum8", "Enum16"):
        return pa.large_string()
    if name == "FixedString":
        return pa.large_binary()
    if name in ("Date", "Date32"):
        return pa.date32()
    if name == "DateTime":
        return pa.timestamp("s", "UTC")
    if name == "DateTime64":
        return pa.timestamp(_time_unit(_precision(u))[0], "UTC")
    if name == "Bool":
        return pa.bool_()
    if name == "Array":
        inner = arrow_type(u.inner)
        return None if inner is None else pa.large_list(inner)
    if name in ("Map", "Tuple") and has_semistructured(u):
        return None  # no union inside these on the columnar path (refused as fatal)
    if name == "Map":
        key_t, val_t = u.type_args()
        key, value = arrow_type(key_t), arrow_type(val_t)
        return None if key is None or value is None else pa.map_(key, value)
    if name == "Tuple":
        fields = []
        for i, element in enumerate(u.type_args()):
            inner = arrow_type(element)
            if inner is None:
                return None
            fields.append(pa.field(element.field or str(i + 1), inner))
        return pa.struct(fields)
    if name == "JSON":
        return pa.large_string()  # the object's JSON text, which the server parses
    if name in ("Variant", "Dynamic"):
        return _union_type(u)
    return None


def _union_type(u: ChType) -> Any:
    """The dense union a ``Variant`` or ``Dynamic`` column is sent as: a child per member
    in an Arrow type ClickHouse reads back as exactly that member (else None)."""
    import pyarrow as pa

    members = u.type_args() if u.name == "Variant" else dynamic_members()
    children = [_exact_type(m) for m in members]
    if any(c is None for c in children):
        return None
    return pa.dense_union(
        [pa.field(str(m), c) for m, c in zip(members, children, strict=True)],
        list(range(len(members))),
    )


def _exact_type(t: ChType) -> Any:
    """The Arrow type ClickHouse reads as exactly ``t`` (a Variant member), or None.

    A date is read as ``Date32`` and a timestamp as ``DateTime64``, so ``Date``,
    ``DateTime``, ``UUID``, ``Enum`` and ``FixedString`` members have none; a list's
    items are nullable only for a ``Nullable`` element.
    """
    import pyarrow as pa

    u = t.unwrapped()
    name = u.name
    if name in _INT_TYPES or name in ("Float32", "Float64", "Bool", "String", "Date32"):
        return arrow_type(u)
    if name == "Decimal":
        return arrow_type(u)
    if name == "DateTime64":
        precision = _precision(u)
        zone = next((a for a in u.args if isinstance(a, str)), None)
        if precision not in (0, 3, 6, 9):
            return None
        return pa.timestamp(_time_unit(precision)[0], zone)
    if name == "Array":
        inner = _exact_type(u.inner)
        if inner is None:
            return None
        return pa.large_list(pa.field("item", inner, nullable=u.inner.nullable))
    if name in ("Variant", "Dynamic"):
        return _union_type(u)
    return None


Converted = tuple[Any, Any]
"""``(array of the column's Arrow type, rows to decide one by one or None)``: a flagged
row's value in the array is a placeholder."""


def convert_column(array: Any, t: ChType) -> tuple[Any, list[tuple[int, str]]]:
    """``array`` in the Arrow type of ``t`` and ``[(row, reason), …]`` for the rows the
    row path refuses (their values in the result are placeholders)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    target = arrow_type(t)
    if target is None and not has_semistructured(t):  # passed through unchecked (a null aside)
        if not t.nullable and array.null_count:
            reason = f"NULL in a column of type {t} (not Nullable)"
            nulls = pc.indices_nonzero(array.is_null()).to_pylist()
            return array, [(i, reason) for i in nulls]
        return array, []
    if has_semistructured(t):
        if target is None:
            raise SinkError(
                f"a column of type {t} cannot be sent as Arrow columns (a member has no "
                f"Arrow type ClickHouse reads back as itself: Date, DateTime, UUID, Enum, "
                f"FixedString, Map, Tuple); write it on the row path",
                ErrorClass.FATAL,
            )
        return _semistructured(array, t, target)
    out, flagged = _convert(array, t)
    if flagged is None or not pc.any(flagged).as_py():
        return out, []
    rows = pc.indices_nonzero(flagged).to_pylist()
    coerce = coercer_for(t, [False])
    to_arrow = _arrow_value(t)
    bad: list[tuple[int, str]] = []
    good: list[int] = []
    values: list[object] = []
    python = _python_value(array.type, t)
    for row in rows:
        try:
            values.append(to_arrow(coerce(python(array[row].as_py()))))
        except BadValue as exc:
            bad.append((row, str(exc)))
            continue
        good.append(row)
    if not good:
        return out, bad
    if pa.types.is_large_string(target) and any(isinstance(v, bytes) for v in values):
        target = pa.large_binary()  # bytes that are not UTF-8 go to a String as bytes
        out = out.cast(target)
        values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    try:
        patch = pa.array(values, type=target)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        patch = None
    if patch is None:  # one by one: a value with no Arrow form is a record error
        kept_rows, kept_values = [], []
        for row, value in zip(good, values, strict=True):
            try:
                pa.array([value], type=target)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                bad.append((row, f"cannot be sent as columns ({exc})"))
                continue
            kept_rows.append(row)
            kept_values.append(value)
        good, patch = kept_rows, pa.array(kept_values, type=target)
    bad.sort()
    return _patched(out, good, patch), bad


def _semistructured(array: Any, t: ChType, target: Any) -> tuple[Any, list[tuple[int, str]]]:
    """A column that is or holds ``JSON``, ``Variant`` or ``Dynamic``: every value decided
    by the row path's coercer, then built in the column's Arrow type (a dense union per
    Variant or Dynamic, JSON text per JSON value; B313)."""
    import pyarrow as pa

    coerce = coercer_for(t, [False])
    python = _python_value(array.type, t)
    bad: list[tuple[int, str]] = []
    written: list[object] = []
    for row, value in enumerate(array.to_pylist()):
        try:
            written.append(coerce(python(value)))
        except BadValue as exc:
            bad.append((row, str(exc)))
            written.append(None)  # a placeholder: the row is dropped
    try:
        return _build(written, t, target), bad
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        pass
    out: list[object] = []
    for row, value in enumerate(written):  # one by one: a value with no Arrow form
        try:
            _build([value], t, target)
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
            bad.append((row, f"cannot be sent as columns ({exc})"))
            value = None
        out.append(value)
    return _build(out, t, target), sorted(bad)


def _build(values: list[object], t: ChType, target: Any) -> Any:
    """The Arrow array of written forms ``values`` (None: NULL or a placeholder)."""
    import pyarrow as pa

    u = t.unwrapped()
    if u.name in ("Variant", "Dynamic"):
        members = u.type_args() if u.name == "Variant" else dynamic_members()
        index = {client_name(m): i for i, m in enumerate(members)}
        grouped: list[list[object]] = [[] for _ in members]
        codes = bytearray()
        offsets: list[int] = []
        for value in values:
            if value is None:
                i, inner = 0, None
            else:
                i, inner = index[value.type_name], value.value  # type: ignore[attr-defined]
            codes.append(i)
            offsets.append(len(grouped[i]))
            grouped[i].append(inner)
        children = [
            _build(v, m, field.type) for v, m, field in zip(grouped, members, target, strict=True)
        ]
        return pa.UnionArray.from_dense(
            pa.array(codes, pa.int8()),
            pa.array(offsets, pa.int32()),
            children,
            [field.name for field in target],
        )
    if u.name == "Array" and has_semistructured(u.inner):
        offsets = [0]
        flat: list[object] = []
        for value in values:
            if value is not None:
                flat.extend(value)  # type: ignore[arg-type]
            offsets.append(len(flat))
        mask = pa.array([v is None for v in values], pa.bool_())
        child = _build(flat, u.inner, target.value_type)
        return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), child, mask=mask)
    convert = _arrow_value(t)
    return pa.array([None if v is None else convert(v) for v in values], type=target)


def _patched(out: Any, rows: list[int], patch: Any) -> Any:
    """``out`` with the values at ``rows`` replaced by ``patch``'s, in order."""
    import polars as pl
    import pyarrow as pa

    n = len(out)
    index = pl.int_range(n, dtype=pl.Int64, eager=True)
    index = index.scatter(rows, pl.int_range(n, n + len(rows), dtype=pl.Int64, eager=True))
    return pa.concat_arrays([out, patch.cast(out.type)]).take(index.to_arrow())


def _valid(array: Any) -> Any:
    return array.is_valid()


def _or(a: Any, b: Any) -> Any:
    import pyarrow.compute as pc

    if a is None:
        return b
    if b is None:
        return a
    return pc.or_(a, b)


def _blank(array: Any, flagged: Any) -> Any:
    """``array`` with the flagged rows null (so a cast never meets their values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if flagged is None:
        return array
    return pc.if_else(flagged, pa.scalar(None, array.type), array)


def _clean(mask: Any) -> Any:
    """A mask with its nulls (rows that are null) false."""
    import pyarrow.compute as pc

    return pc.fill_null(mask, False) if mask.null_count else mask


def _convert(array: Any, t: ChType) -> Converted:
    import pyarrow as pa

    target = arrow_type(t)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_null(array.type):
        flagged = None if t.nullable or not len(array) else pa.array([True] * len(array))
        return pa.nulls(len(array), target), flagged
    out, flagged = _value(array, t.unwrapped(), target)
    if not t.nullable and array.null_count:
        flagged = _or(flagged, array.is_null())
    return out, flagged


def _everything(array: Any, target: Any) -> Converted:
    """Every value flagged (a kind the kernels do not convert into this column)."""
    import pyarrow as pa

    return pa.nulls(len(array), target), _valid(array)


def _value(array: Any, u: ChType, target: Any) -> Converted:
    import pyarrow as pa

    name = u.name
    kind = array.type
    if name in _INT_TYPES:
        return _integers(array, INT_RANGES[name], target)
    if name in _WIDE_INTS:
        return _wide_integers(array, _WIDE_INTS[name][1], target)
    if pa.types.is_uint64(kind) and name not in ("Float32", "Float64", "BFloat16", "Decimal"):
        # beyond Int64 no date, time, Enum or Bool takes it: the row path decides those
        big = _in_range(array, 0, 2**63 - 1)
        out, flagged = _value(_blank(array, big).cast(pa.int64()), u, target)
        return out, _or(flagged, big)
    if name in ("Float32", "Float64", "BFloat16"):
        return _floats(array, name != "Float64", target)
    if name == "Decimal":
        return _decimals(array, u, target)
    if name == "String":
        if pa.types.is_large_string(kind) or pa.types.is_string(kind):
            return array.cast(target), None
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            return _binary_text(array, target)
        if pa.types.is_fixed_size_binary(kind):
            return _binary_text(array.cast(pa.large_binary()), target)
        return _everything(array, target)
    if name == "FixedString":
        return _fixed(array, next(a for a in u.args if isinstance(a, int)), target)
    if name in ("Date", "Date32"):
        return _dates(array, DATE_RANGE if name == "Date" else DATE32_RANGE, target)
    if name == "DateTime":
        return _times(array, 0, target, seconds=True)
    if name == "DateTime64":
        return _times(array, _precision(u), target, seconds=False)
    if name == "UUID":
        return _uuids(array, target)
    if name == "Bool":
        return _bools(array, target)
    if name in ("Enum8", "Enum16"):
        return _enums(array, u, target)
    if name == "Array":
        return _lists(array, u, target)
    if name == "Map":
        return _maps(array, u, target)
    if name == "Tuple":
        return _tuples(array, u, target)
    return _everything(array, target)  # pragma: no cover - arrow_type() is None for others


# -- scalars --------------------------------------------------------------------------------


def _in_range(array: Any, lo: int | float, hi: int | float) -> Any:
    """Rows of a numeric array outside ``[lo, hi]`` (nulls false); a bound beyond what
    the array's type holds is no bound."""
    import pyarrow as pa
    import pyarrow.compute as pc

    checks = []
    for bound, test in ((lo, pc.less), (hi, pc.greater)):
        try:
            scalar = pa.scalar(bound, array.type)
        except (pa.ArrowInvalid, OverflowError, TypeError):
            continue  # integer bound beyond the array's integer type
        checks.append(test(array, scalar))
    if not checks:
        return pa.repeat(pa.scalar(False), len(array)) if len(array) else pa.array([], pa.bool_())
    mask = checks[0] if len(checks) == 1 else pc.or_(checks[0], checks[1])
    return _clean(mask)


def _integers(array: Any, bounds: tuple[int, int], target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    lo, hi = bounds
    kind = array.type
    if pa.types.is_boolean(kind):
        return array.cast(target), None
    if pa.types.is_integer(kind):
        flagged = _in_range(array, lo, hi)
        return _blank(array, flagged).cast(target, safe=False), flagged
    if pa.types.is_floating(kind):
        array = array.cast(pa.float64())
        # the range as floats, exclusive above: hi + 1 is a power of two, exact as a float
        whole = pc.equal(pc.floor(array), array)  # false for NaN and the infinities
        outside = pc.or_(pc.less(array, float(lo)), pc.greater_equal(array, float(hi + 1)))
        flagged = _clean(pc.or_(pc.invert(whole), outside))
        return _blank(array, flagged).cast(target, safe=False), flagged
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        plain = _clean(pc.match_substring_regex(array, _INT_TEXT))
        numbers = _blank(array, pc.invert(plain)).cast(pa.int64())
        flagged = _or(_clean(pc.invert(plain)), _in_range(numbers, lo, hi))
        flagged = pc.and_(flagged, _valid(array))
        return _blank(numbers, flagged).cast(target, safe=False), flagged
    return _everything(array, target)


def _wide_integers(array: Any, signed: bool, target: Any) -> Converted:
    """Integers into ``(U)Int128/256``: every 64-bit integer fits (a negative one but
    into an unsigned column); other kinds as into ``Int64``, and what does not fit an
    ``Int64`` is decided by the row path (B138)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_unsigned_integer(kind):
        low = array.cast(pa.uint64()).view(pa.int64())
        return _words(low, None, target), None
    numbers, flagged = _integers(array, INT_RANGES["Int64"], pa.int64())
    negative = _clean(pc.less(numbers, 0))
    if not signed:
        flagged = _or(flagged, negative)
        numbers = _blank(numbers, negative)
        negative = None
    return _words(numbers, negative, target), flagged


def _words(low: Any, negative: Any, target: Any) -> Any:
    """Fixed-size binary values of ``target``'s width from 64-bit words: ``low`` and,
    above it, ``-1`` where ``negative`` is true and 0 elsewhere (the sign extension)."""
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(low)
    words = target.byte_width // 8
    if negative is None:
        high = pa.repeat(pa.scalar(0, pa.int64()), n)
    else:
        high = pc.if_else(negative, pa.scalar(-1, pa.int64()), pa.scalar(0, pa.int64()))
    parts = pa.concat_arrays([low.fill_null(0), *([high] * (words - 1))])
    k = pl.int_range(words * n, dtype=pl.Int64, eager=True)
    interleaved = parts.take(((k % words) * n + k // words).to_arrow())
    out = pa.FixedSizeBinaryArray.from_buffers(target, n, [None, interleaved.buffers()[1]])
    return _blank(out, low.is_null()) if low.null_count else out


def _floats(array: Any, single: bool, target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    flagged = None
    if pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        doubles = array.cast(pa.float64(), safe=False)  # float(int): rounded to nearest
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        plain = _clean(pc.match_substring_regex(array, _FLOAT_TEXT))
        flagged = pc.and_(pc.invert(plain), _valid(array))
        doubles = _blank(array, flagged).cast(pa.float64())
    else:
        return _everything(array, target)
    if single:
        big = _clean(pc.and_(pc.is_finite(doubles), pc.greater(pc.abs(doubles), F32_MAX)))
        flagged = _or(flagged, big)
    return _blank(doubles, flagged).cast(target, safe=False), flagged


def _decimals(array: Any, u: ChType, target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    precision, scale = (a for a in u.args if isinstance(a, int))
    kind = array.type
    if pa.types.is_decimal(kind):
        try:
            return array.cast(target), None
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _everything(array, target)
    whole = 10.0 ** (precision - scale)
    if pa.types.is_integer(kind):
        flagged = None
        if precision - scale <= 19:  # wider columns take every int64 and uint64
            bound = 10 ** (precision - scale)  # a bound the array's type cannot hold is none
            flagged = _in_range(array, -bound + 1, bound - 1)
        wide = pa.decimal128(38, 0) if target.bit_width == 128 else pa.decimal256(76, 0)
        return _blank(array, flagged).cast(wide).cast(target), flagged
    if pa.types.is_floating(kind):
        doubles = array.cast(pa.float64())
        factor = 10.0**scale
        # x has at most `scale` places (its shortest repr) when round(x·10^s)/10^s is x
        # again; exact below 2^53 / 10^s, where the doubles are finer than 10^-s
        limit = min(whole, 2.0**53 / factor)
        scaled = pc.round(pc.multiply(doubles, factor))
        exact = pc.equal(pc.divide(scaled, factor), doubles)
        small = pc.less(pc.abs(doubles), limit)
        flagged = _clean(pc.invert(pc.and_(exact, small)))
        # Arrow rounds x·10^s to the nearest unit: the unit checked above
        return _blank(doubles, flagged).cast(target, safe=False), flagged
    return _everything(array, target)


def _binary_text(array: Any, target: Any) -> Converted:
    """Bytes into a ``String``: UTF-8 as text; other bytes are flagged (the row path sends
    them as bytes at the top level and refuses them nested)."""
    import pyarrow as pa

    try:
        return array.cast(pa.large_binary()).cast(target), None
    except pa.ArrowInvalid:
        return _everything(array, target)


def _fixed(array: Any, width: int, target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_fixed_size_binary(kind):
        if kind.byte_width == width:
            return array.cast(target), None
        return _everything(array, target)
    if not (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        return _everything(array, target)
    raw = array.cast(pa.large_binary())
    flagged = _clean(pc.not_equal(pc.binary_length(raw), width))  # padded or refused per row
    return _blank(raw, flagged), flagged


def _dates(array: Any, bounds: tuple[int, int], target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    lo, hi = bounds
    kind = array.type
    if pa.types.is_date(kind):
        days = array.cast(pa.date32()).cast(pa.int32())
        flagged = None
    elif pa.types.is_integer(kind):
        days = array.cast(pa.int64())
        flagged = None
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        prefix = _clean(pc.match_substring_regex(array, _DATE_TEXT))
        head = pc.utf8_slice_codeunits(_blank(array, pc.invert(prefix)), 0, 10)
        parsed = pc.strptime(head, format="%Y-%m-%d", unit="s", error_is_null=True)
        # strptime rolls a day past the month's end over (2024-02-30 is March 1st)
        exact = _clean(pc.equal(pc.strftime(parsed, format="%Y-%m-%d"), head))
        days = parsed.cast(pa.date32()).cast(pa.int32())
        flagged = pc.and_(_valid(array), pc.invert(exact))
    else:
        return _everything(array, target)
    flagged = _or(flagged, _in_range(days, lo, hi))
    return _blank(days, flagged).cast(pa.int32()).cast(target), flagged


def _floor_div(values: Any, divisor: int) -> Any:
    """Floor division of an int64 array (Arrow's integer division truncates)."""
    import pyarrow.compute as pc

    if divisor == 1:
        return values
    q = pc.divide(values, divisor)
    r = pc.subtract(values, pc.multiply(q, divisor))
    return pc.subtract(q, pc.less(r, 0).cast(values.type))


def _micros(array: Any) -> tuple[Any, Any]:
    """``(microseconds since the epoch as int64, flagged rows)`` of temporal values and
    ISO text; None when the array holds neither."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_timestamp(kind):
        return array.cast(pa.timestamp("us", kind.tz), safe=False).cast(pa.int64()), None
    if pa.types.is_date(kind):
        days = array.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
        return pc.multiply(days, 86_400_000_000), None
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None, None
    iso = _clean(pc.match_substring_regex(array, _TIME_TEXT))
    flagged = pc.and_(_valid(array), pc.invert(iso))
    zoned = _clean(pc.match_substring_regex(array, _ZONED_TEXT))
    micros = pa.nulls(len(array), pa.int64())
    for mask, tz in ((pc.and_(iso, zoned), "UTC"), (pc.and_(iso, pc.invert(zoned)), None)):
        if not pc.any(mask).as_py():
            continue
        part = _blank(array, pc.invert(mask))
        try:
            moments = part.cast(pa.timestamp("us", tz)).cast(pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            flagged = pc.or_(flagged, mask)  # a date that does not exist: decided per row
            continue
        micros = pc.if_else(mask, moments, micros)
    return micros, flagged


def _times(array: Any, precision: int, target: Any, *, seconds: bool) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    flagged = None
    if pa.types.is_integer(kind):
        ticks = array.cast(pa.int64())  # seconds (DateTime) or ticks of 10^-p s
    elif pa.types.is_floating(kind) and seconds:
        doubles = array.cast(pa.float64())
        flagged = _clean(
            pc.or_(
                pc.invert(pc.is_finite(doubles)),
                pc.or_(pc.less(doubles, 0.0), pc.greater_equal(doubles, 2.0**32)),
            )
        )
        ticks = pc.floor(_blank(doubles, flagged)).cast(pa.int64())
    else:
        micros, flagged = _micros(array)
        if micros is None:
            return _everything(array, target)
        if precision >= 6:
            ticks = pc.multiply(micros, 10 ** (precision - 6))  # below 2262 for p = 9
        else:
            ticks = _floor_div(micros, 10 ** (6 - precision))
    if seconds:
        lo, hi = DATETIME_RANGE
    else:
        per_second = 10**precision
        lo = max(DATETIME64_SECONDS[0] * per_second, -(2**63))
        hi = min(DATETIME64_SECONDS[1] * per_second, 2**63) - 1
    flagged = _or(flagged, _in_range(ticks, lo, hi))
    ticks = _blank(ticks, flagged)
    scale = 0 if seconds else _time_unit(precision)[1] - precision
    if scale:
        ticks = pc.multiply(ticks, 10**scale)
    return ticks.cast(target), flagged


def _uuids(array: Any, target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return _everything(array, target)
    plain = _clean(pc.match_substring_regex(array, _UUID_TEXT))
    flagged = pc.and_(_valid(array), pc.invert(plain))
    return _blank(array, flagged).cast(target), flagged


def _bools(array: Any, target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_boolean(kind):
        return array, None
    if pa.types.is_integer(kind):
        flagged = _in_range(array, 0, 1)
        return _blank(array, flagged).cast(target), flagged
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        truth = pc.is_in(array, value_set=pa.array(["true", "1"]))
        known = pc.is_in(array, value_set=pa.array(["true", "false", "1", "0"]))
        flagged = pc.and_(_valid(array), pc.invert(known))
        return _blank(truth, flagged), flagged
    return _everything(array, target)


def _enums(array: Any, u: ChType, target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    items = [a for a in u.args if isinstance(a, EnumItem)]
    names = pa.array([item.name for item in items], pa.large_string())
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = array.cast(pa.large_string())
        flagged = pc.and_(_valid(array), pc.invert(pc.is_in(text, value_set=names)))
        return _blank(text, flagged), flagged
    if pa.types.is_integer(kind):
        values = pa.array([item.value for item in items], pa.int64())
        index = pc.index_in(array.cast(pa.int64()), value_set=values)
        flagged = pc.and_(_valid(array), index.is_null())
        return names.take(index), flagged
    return _everything(array, target)


# -- nested ---------------------------------------------------------------------------------


def _parents(child_flagged: Any, parent_of: Any, n: int) -> Any:
    """The parent rows of flagged elements, as a mask of ``n`` rows."""
    import polars as pl
    import pyarrow.compute as pc

    if child_flagged is None or not pc.any(child_flagged).as_py():
        return None
    rows = pl.Series(pc.filter(parent_of, child_flagged)).unique()
    return pl.repeat(False, n, eager=True).scatter(rows, True).to_arrow()


def _offsets(array: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = array.offsets
    return pc.subtract(offsets, offsets[0]).cast(pa.int64())


def _lists(array: Any, u: ChType, target: Any) -> Converted:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return _everything(array, target)
    values, child = _convert(array.flatten(), u.inner)
    flagged = _parents(child, pc.list_parent_indices(array), len(array))
    out = pa.LargeListArray.from_arrays(
        _offsets(array), values, type=target, mask=array.is_null() if array.null_count else None
    )
    return out, flagged


def _parent_indices(offsets: Any) -> Any:
    """The row of each element of a list or map array, from its offsets (rebased to 0).

    ``pyarrow.compute.list_parent_indices`` aborts the process on a ``MapArray`` (an
    unchecked type assertion in Arrow's C++), so a plain list over the same offsets
    stands in for it (B171)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = offsets[-1].as_py() if len(offsets) else 0
    return pc.list_parent_indices(pa.LargeListArray.from_arrays(offsets, pa.nulls(total)))


def _entries(array: Any) -> Any:
    """A map or a list of ``{key, value}`` structs as ``(offsets, keys, values)``."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_map(kind):
        # A sliced map's keys and items are the whole child arrays: cut them to the slice.
        raw = array.offsets
        start = raw[0].as_py() if len(raw) else 0
        stop = raw[-1].as_py() if len(raw) else 0
        keys = array.keys.slice(start, stop - start)
        return _offsets(array), keys, array.items.slice(start, stop - start)
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_struct(
        kind.value_type
    ):
        names = [f.name for f in kind.value_type]
        if names == ["key", "value"]:
            flat = array.flatten()
            return _offsets(array), flat.field("key"), flat.field("value")
    return None


def _maps(array: Any, u: ChType, target: Any) -> Converted:
    import pyarrow as pa

    entries = _entries(array)
    if entries is None:
        return _everything(array, target)
    offsets, keys, items = entries
    key_t, val_t = u.type_args()
    key_out, key_flagged = _convert(keys, key_t)
    val_out, val_flagged = _convert(items, val_t)
    flagged = _parents(_or(key_flagged, val_flagged), _parent_indices(offsets), len(array))
    out = pa.MapArray.from_arrays(
        offsets.cast(pa.int32()),
        key_out,
        val_out,
        type=target,
        mask=array.is_null() if array.null_count else None,
    )
    return out, flagged


def _tuples(array: Any, u: ChType, target: Any) -> Converted:
    import pyarrow as pa

    elements = u.type_args()
    kind = array.type
    if not pa.types.is_struct(kind) or not elements or any(e.field is None for e in elements):
        return _everything(array, target)  # the row path takes a mapping for named tuples
    have = {f.name for f in kind}
    if any(e.field not in have and not e.nullable for e in elements):
        return _everything(array, target)
    children = []
    flagged = None
    for element, field in zip(elements, target, strict=True):
        if element.field not in have:  # an absent key of a Nullable element is NULL (B139)
            children.append(pa.nulls(len(array), field.type))
            continue
        child, child_flagged = _convert(array.field(element.field), element)
        children.append(child)
        flagged = _or(flagged, child_flagged)
    out = pa.StructArray.from_arrays(
        children,
        fields=list(target),
        mask=array.is_null() if array.null_count else None,
    )
    return out, flagged


# -- the flagged rows -----------------------------------------------------------------------


def _python_value(kind: Any, t: ChType) -> Callable[[object], object]:
    """How an Arrow value's Python form becomes what the row path's decoder would give:
    maps (pairs in Arrow) are dicts, an object's absent fields are no keys of a map."""
    import pyarrow as pa

    u = t.unwrapped()
    name = u.name
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if name == "Map" and (pa.types.is_map(kind) or _entries_type(kind)):
        return _pairs_dict
    if name == "Map" and pa.types.is_struct(kind):
        return _present_fields
    if name == "Array" and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        inner = _python_value(kind.value_type, u.inner)
        return lambda v: v if v is None else [inner(x) for x in v]  # type: ignore[attr-defined]
    return _same


def _entries_type(kind: Any) -> bool:
    import pyarrow as pa

    return (
        (pa.types.is_list(kind) or pa.types.is_large_list(kind))
        and pa.types.is_struct(kind.value_type)
        and [f.name for f in kind.value_type] == ["key", "value"]
    )


def _same(value: object) -> object:
    return value


def _pairs_dict(value: object) -> object:
    if value is None:
        return None
    return {
        (p["key"] if isinstance(p, dict) else p[0]): (p["value"] if isinstance(p, dict) else p[1])
        for p in value  # type: ignore[attr-defined]
    }


def _present_fields(value: object) -> object:
    if not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if v is not None}


def _arrow_value(t: ChType) -> Callable[[object], object]:
    """The Python value pyarrow builds the column's Arrow type from, given the row path's
    written form of a value (see :mod:`spate_clickhouse._coerce`)."""
    u = t.unwrapped()
    name = u.name
    nullable = t.nullable
    convert: Callable[[object], object]
    if name == "DateTime":

        def convert(value: object) -> object:
            assert isinstance(value, dt.datetime)
            return _micros_of(value) // 1_000_000

    elif name == "DateTime64":
        precision = _precision(u)
        scale = _time_unit(precision)[1] - precision

        def convert(value: object) -> object:
            if isinstance(value, int):  # ticks (precision above 6)
                return value * 10**scale
            assert isinstance(value, dt.datetime)
            return _micros_of(value) * 10**precision // 1_000_000 * 10**scale

    elif name == "UUID":
        convert = str
    elif name in ("Enum8", "Enum16"):
        by_value = {a.value: a.name for a in u.args if isinstance(a, EnumItem)}
        convert = by_value.__getitem__  # type: ignore[assignment]
    elif name == "Array":
        inner = _arrow_value(u.inner)

        def convert(value: object) -> object:
            return [inner(v) for v in value]  # type: ignore[attr-defined]

    elif name == "Map":
        key_t, val_t = u.type_args()
        key, val = _arrow_value(key_t), _arrow_value(val_t)

        def convert(value: object) -> object:
            return [(key(k), val(v)) for k, v in value.items()]  # type: ignore[attr-defined]

    elif name == "Tuple":
        elements = u.type_args()
        parts = [(e.field or str(i + 1), _arrow_value(e)) for i, e in enumerate(elements)]

        def convert(value: object) -> object:
            return {n: c(v) for (n, c), v in zip(parts, value, strict=True)}  # type: ignore[call-overload]

    elif name == "Decimal":
        convert = _decimal
    elif name in _WIDE_INTS:
        width, signed = _WIDE_INTS[name]

        def convert(value: object) -> object:
            assert isinstance(value, int)
            return value.to_bytes(width, "little", signed=signed)

    else:
        convert = _same
    if not nullable:
        return convert
    return lambda value: None if value is None else convert(value)


def _decimal(value: object) -> object:
    assert isinstance(value, decimal.Decimal)
    return value


def _micros_of(moment: dt.datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
