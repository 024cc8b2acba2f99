"""Per-record value checks and coercions, one compiled function per row shape.

clickhouse-connect encodes a whole column at once and picks its encoding from the first
value (an ``int`` first makes a ``DateTime`` column take epoch seconds; a ``bytes`` first
makes a ``String`` column refuse ``str``), and a value it cannot encode fails the whole
block with no server error code. So every value is checked, and converted to the one
Python form its column is written in, when the row is appended to a buffer: a bad value
is then one record error (``SinkError`` with ``ErrorClass.RECORD``, naming column, type
and value) that follows the record error policy, never a failed batch.

The forms written per type (what a coercer returns):

===========================  =====================================================
``(U)Int8..256``             ``int`` in range (from int, bool, integral float or
                             Decimal, numeric text)
``Float32/64``               ``float`` (Float32: finite values within its range)
``Decimal(P, S)``            ``Decimal`` with at most S places and P digits
``String``                   ``str``; bytes that are UTF-8 are decoded, other bytes
                             kept as ``bytes`` (the column is then sent as bytes)
``FixedString(N)``           ``bytes`` of N bytes (shorter values padded with zero bytes)
``Date`` / ``Date32``        ``datetime.date`` (from a date, an aware or naive
                             datetime, ISO text or days since 1970-01-01)
``DateTime``                 aware ``datetime`` (naive ones are UTC; an ``int`` or
                             ``float`` is seconds since the epoch)
``DateTime64(p)``            aware ``datetime`` for p <= 6, else ``int`` ticks of
                             10^-p s (an ``int`` given is taken as ticks)
``UUID``                     ``uuid.UUID``
``Bool``                     ``bool``
``Enum8/16``                 ``int`` value (from the name or the value)
``Nullable(T)``              ``None`` or T's form; ``LowCardinality(T)``: T's form
``Array(T)``, ``Map(K, V)``  ``list`` / ``dict`` of the element forms
``Tuple(...)``               ``tuple`` of the element forms (a mapping for named ones;
                             an absent key is NULL for a ``Nullable`` element)
``JSON(...)``                JSON text of an object (typed paths checked by their
                             types, skipped paths dropped)
``Variant(...)``             ``None`` or a ``TypedVariant`` of the member that takes it
``Dynamic``                  ``None`` or a ``TypedVariant`` of the value's own type
                             (see :mod:`spate_clickhouse._semistructured`)
===========================  =====================================================

Other types (IPv4, Point, ...) are passed through unchecked.

The row as a whole (shapes, the generated per-row function, the batch buffer) is
:mod:`spate_clickhouse._encoder`. Upholds B28 (a bad value is a counted record error, never
a crashed batch).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import operator
import uuid
from collections.abc import Callable, Mapping, Sequence

from spate_clickhouse._semistructured import dynamic_coercer, json_coercer, variant_coercer
from spate_clickhouse._types import ChType, EnumItem

Coercer = Callable[[object], object]

_UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_ORDINAL = _EPOCH_DATE.toordinal()
F32_MAX = 3.4028234663852886e38

INT_RANGES: dict[str, tuple[int, int]] = {
    "Int8": (-(2**7), 2**7 - 1),
    "Int16": (-(2**15), 2**15 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "Int64": (-(2**63), 2**63 - 1),
    "Int128": (-(2**127), 2**127 - 1),
    "Int256": (-(2**255), 2**255 - 1),
    "UInt8": (0, 2**8 - 1),
    "UInt16": (0, 2**16 - 1),
    "UInt32": (0, 2**32 - 1),
    "UInt64": (0, 2**64 - 1),
    "UInt128": (0, 2**128 - 1),
    "UInt256": (0, 2**256 - 1),
}
DATE_RANGE = (0, 65_535)  # 1970-01-01 .. 2149-06-06
DATE32_RANGE = (dt.date(1900, 1, 1).toordinal() - _EPOCH_ORDINAL, 120_529)  # .. 2299-12-31
DATETIME_RANGE = (0, 2**32 - 1)
DATETIME64_SECONDS = (
    int((dt.datetime(1900, 1, 1, tzinfo=_UTC) - EPOCH).total_seconds()),
    int((dt.datetime(2300, 1, 1, tzinfo=_UTC) - EPOCH).total_seconds()),
)


class BadValue(ValueError):
    """A value that its column cannot take; the message says why."""


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _bad(value: object, expected: str) -> BadValue:
    return BadValue(f"expected {expected}, got {_describe(value)}")


# -- scalar coercers ------------------------------------------------------------------------


def _int_coercer(lo: int, hi: int, label: str) -> Coercer:
    def coerce(value: object) -> object:
        if value.__class__ is int:
            number = value
        elif isinstance(value, bool):
            number = int(value)
        elif isinstance(value, float):
            if not value.is_integer():
                raise _bad(value, f"a whole number for {label}")
            number = int(value)
        elif isinstance(value, decimal.Decimal):
            if not value.is_finite() or value != value.to_integral_value():
                raise _bad(value, f"a whole number for {label}")
            number = int(value)
        elif isinstance(value, str):
            try:
                number = int(value.strip())
            except ValueError:
                raise _bad(value, f"a whole number for {label}") from None
        else:
            try:
                number = operator.index(value)  # type: ignore[arg-type]
            except TypeError:
                raise _bad(value, f"an integer for {label}") from None
        if not lo <= number <= hi:
            raise BadValue(f"{number} is out of range for {label} [{lo}, {hi}]")
        return number

    return coerce


def _float_coercer(label: str) -> Coercer:
    limit = F32_MAX if label == "Float32" else math.inf

    def coerce(value: object) -> object:
        if value.__class__ is float:
            number = value
        elif isinstance(value, (int, float, decimal.Decimal)):
            try:
                number = float(value)
            except OverflowError:
                raise BadValue(f"{value} is out of range for {label}") from None
            except ValueError:  # a signalling NaN
                raise _bad(value, f"a number for {label}") from None
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                raise _bad(value, f"a number for {label}") from None
        else:
            raise _bad(value, f"a number for {label}")
        if math.isfinite(number) and abs(number) > limit:
            raise BadValue(f"{number} is out of range for {label}")
        return number

    return coerce


def _decimal_coercer(precision: int, scale: int) -> Coercer:
    label = f"Decimal({precision}, {scale})"
    quantum = decimal.Decimal(1).scaleb(-scale)
    context = decimal.Context(prec=200)  # quantize exactly; the digit count is checked after

    def coerce(value: object) -> object:
        if isinstance(value, decimal.Decimal):
            number = value
        elif isinstance(value, bool):
            raise _bad(value, f"a number for {label}")
        elif isinstance(value, int):
            number = decimal.Decimal(value)
        elif isinstance(value, float):
            number = decimal.Decimal(repr(value))
        elif isinstance(value, str):
            try:
                number = decimal.Decimal(value.strip())
            except decimal.InvalidOperation:
                raise _bad(value, f"a number for {label}") from None
        else:
            raise _bad(value, f"a number for {label}")
        if not number.is_finite():
            raise BadValue(f"{number} cannot be stored in {label}")
        exponent = number.as_tuple().exponent
        if isinstance(exponent, int) and -exponent > scale:
            try:
                exact = number.quantize(quantum, context=context)
            except decimal.InvalidOperation:
                raise BadValue(f"{number} does not fit {label}") from None
            if exact != number:
                raise BadValue(f"{number} has more than {scale} decimal places for {label}")
            number = exact
        digits = len(number.as_tuple().digits)
        exponent = number.as_tuple().exponent
        integral = digits + exponent if isinstance(exponent, int) else digits
        if integral > precision - scale:
            raise BadValue(f"{number} does not fit {label}")
        return number

    return coerce


def _string_coercer(binary_seen: list[bool] | None) -> Coercer:
    def coerce(value: object) -> object:
        if value.__class__ is str:
            return value
        if isinstance(value, str):
            return str(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)  # a memoryview is borrowed: copy it
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                if binary_seen is None:
                    raise BadValue("bytes that are not UTF-8 in a nested String") from None
                binary_seen[0] = True
                return raw
        raise _bad(value, "text (str) or bytes")

    return coerce


def _fixed_string_coercer(width: int) -> Coercer:
    def coerce(value: object) -> object:
        if isinstance(value, str):
            raw = value.encode("utf-8")
        elif isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
        else:
            raise _bad(value, f"bytes or text for FixedString({width})")
        if len(raw) > width:
            raise BadValue(f"{len(raw)} bytes do not fit FixedString({width})")
        # ClickHouse pads with zero bytes; clickhouse-connect wants the padded value
        return raw if len(raw) == width else raw.ljust(width, b"\x00")

    return coerce


def _date_days(value: object, label: str) -> int:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_UTC)
        return value.toordinal() - _EPOCH_ORDINAL
    if isinstance(value, dt.date):
        return value.toordinal() - _EPOCH_ORDINAL
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip()[:10]).toordinal() - _EPOCH_ORDINAL
        except ValueError:
            raise _bad(value, f"an ISO date for {label}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _bad(value, f"a date or days since 1970-01-01 for {label}")


def _date_coercer(label: str, bounds: tuple[int, int]) -> Coercer:
    lo, hi = bounds

    def coerce(value: object) -> object:
        result: dt.date | None = None
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            days = value.toordinal() - _EPOCH_ORDINAL
            result = value
        else:
            days = _date_days(value, label)
        if not lo <= days <= hi:
            raise BadValue(f"{_describe(value)} is out of range for {label}")
        return result if result is not None else dt.date.fromordinal(days + _EPOCH_ORDINAL)

    return coerce


def date_bounds(name: str) -> tuple[dt.date, dt.date]:
    """First and last date of a ``Date`` or ``Date32`` column."""
    lo, hi = DATE_RANGE if name == "Date" else DATE32_RANGE
    return dt.date.fromordinal(lo + _EPOCH_ORDINAL), dt.date.fromordinal(hi + _EPOCH_ORDINAL)


def _as_datetime(value: object, label: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise _bad(value, f"an ISO date-time for {label}") from None
    raise _bad(value, f"a datetime for {label}")


def _micros_since_epoch(moment: dt.datetime) -> int:
    delta = moment - EPOCH if moment.tzinfo is not None else moment - _EPOCH_NAIVE
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def datetime_bounds(name: str, precision: int = 0) -> tuple[dt.datetime, dt.datetime]:
    """First and last instant (UTC) of a ``DateTime`` or ``DateTime64`` column."""
    if name == "DateTime":
        lo, hi = DATETIME_RANGE
        return EPOCH + dt.timedelta(seconds=lo), EPOCH + dt.timedelta(seconds=hi)
    lo, hi = DATETIME64_SECONDS
    return EPOCH + dt.timedelta(seconds=lo), EPOCH + dt.timedelta(seconds=hi, microseconds=-1)


def _aware(moment: dt.datetime) -> dt.datetime:
    # Naive datetimes are UTC (clickhouse-connect would read them as local time).
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=_UTC)


def _datetime_coercer(label: str) -> Coercer:
    lo, hi = DATETIME_RANGE

    def coerce(value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            seconds, moment = value, None
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise BadValue(f"{value} is not a time for {label}")
            seconds, moment = math.floor(value), None
        else:
            moment = _aware(_as_datetime(value, label))
            seconds = _micros_since_epoch(moment) // 1_000_000
        if not lo <= seconds <= hi:
            raise BadValue(f"{_describe(value)} is out of range for {label}")
        return moment if moment is not None else EPOCH + dt.timedelta(seconds=seconds)

    return coerce


def _datetime64_coercer(precision: int, label: str) -> Coercer:
    per_second = 10**precision
    lo, hi = (s * per_second for s in DATETIME64_SECONDS)
    lo, hi = max(lo, -(2**63)), min(hi, 2**63)  # ticks are Int64 (DateTime64(9) ends in 2262)
    as_datetime = precision <= 6  # exact in a datetime: written as one

    def coerce(value: object) -> object:
        moment = None
        if isinstance(value, int) and not isinstance(value, bool):
            ticks = value
        else:
            moment = _aware(_as_datetime(value, label))
            micros = _micros_since_epoch(moment)
            if precision >= 6:
                ticks = micros * 10 ** (precision - 6)
            else:
                ticks = micros // 10 ** (6 - precision)
        if not lo <= ticks < hi:
            raise BadValue(f"{_describe(value)} is out of range for {label}")
        if not as_datetime:
            return ticks
        if moment is not None:
            return moment
        return EPOCH + dt.timedelta(microseconds=ticks * 10 ** (6 - precision))

    return coerce


def _uuid_coerce(value: object) -> object:
    if isinstance(value, uuid.UUID):
        return value
    try:
        if isinstance(value, str):
            return uuid.UUID(value.strip())
        if isinstance(value, (bytes, bytearray, memoryview)) and len(value) == 16:
            return uuid.UUID(bytes=bytes(value))
        if isinstance(value, int) and not isinstance(value, bool):
            return uuid.UUID(int=value)
    except ValueError:
        pass
    raise _bad(value, "a UUID")


def _bool_coerce(value: object) -> object:
    if value is True or value is False:
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise _bad(value, "a bool")


def _enum_coercer(t: ChType) -> Coercer:
    items = [a for a in t.args if isinstance(a, EnumItem)]
    by_name = {item.name: item.value for item in items}
    values = frozenset(by_name.values())
    names = ", ".join(sorted(by_name))

    def coerce(value: object) -> object:
        if isinstance(value, str):
            try:
                return by_name[value]
            except KeyError:
                raise BadValue(f"{value!r} is not one of {t.name}'s names ({names})") from None
        if isinstance(value, int) and not isinstance(value, bool) and value in values:
            return value
        raise _bad(value, f"one of {names}")

    return coerce


# -- composite coercers ---------------------------------------------------------------------


def _nullable(inner: Coercer) -> Coercer:
    def coerce(value: object) -> object:
        return None if value is None else inner(value)

    return coerce


def _not_null(inner: Coercer, label: str) -> Coercer:
    def coerce(value: object) -> object:
        if value is None:
            raise BadValue(f"NULL in a column of type {label} (not Nullable)")
        return inner(value)

    return coerce


def _array_coercer(element: Coercer) -> Coercer:
    def coerce(value: object) -> object:
        if isinstance(value, (list, tuple)):
            return [element(v) for v in value]
        raise _bad(value, "a list")

    return coerce


def _map_coercer(key: Coercer, val: Coercer) -> Coercer:
    def coerce(value: object) -> object:
        if isinstance(value, Mapping):
            return {key(k): val(v) for k, v in value.items()}
        raise _bad(value, "a mapping")

    return coerce


def _tuple_coercer(
    elements: Sequence[Coercer], names: Sequence[str | None], nullable: Sequence[bool]
) -> Coercer:
    """A named tuple takes a mapping as a row does: an absent key is NULL for a
    ``Nullable`` element and refused for any other (B139)."""
    count = len(elements)
    named = all(n is not None for n in names) and count > 0
    parts = list(zip(elements, names, nullable, strict=True))

    def coerce(value: object) -> object:
        if named and isinstance(value, Mapping):
            out = []
            for c, n, may_be_null in parts:
                if n in value:
                    out.append(c(value[n]))
                elif may_be_null:
                    out.append(None)
                else:
                    raise BadValue(f"the tuple has no element {n!r}")
            return tuple(out)
        if isinstance(value, (list, tuple)) and len(value) == count:
            return tuple(c(v) for c, v in zip(elements, value, strict=True))
        raise _bad(value, f"a tuple of {count} values")

    return coerce


def _identity(value: object) -> object:
    return value


def coercer_for(t: ChType, binary_seen: list[bool] | None = None) -> Coercer:
    """The coercer of one column type (NULL is refused unless the type is Nullable).

    ``binary_seen`` is set to ``[True]`` when a top-level ``String`` column met bytes that
    are not UTF-8 (the writer then sends that column as bytes).
    """
    if t.name == "Nullable":
        return _nullable(_value_coercer(t.inner, binary_seen))
    if t.name == "LowCardinality":
        return coercer_for(t.inner, binary_seen)
    if t.name in ("Variant", "Dynamic"):  # NULL is a value of these (no Nullable wrapper)
        return _value_coercer(t, binary_seen)
    return _not_null(_value_coercer(t, binary_seen), str(t))


def _value_coercer(t: ChType, binary_seen: list[bool] | None) -> Coercer:
    name = t.name
    label = str(t)
    if name in INT_RANGES:
        lo, hi = INT_RANGES[name]
        return _int_coercer(lo, hi, name)
    if name in ("Float32", "Float64", "BFloat16"):
        return _float_coercer(name)
    if name == "Decimal":
        precision, scale = (a for a in t.args if isinstance(a, int))
        return _decimal_coercer(precision, scale)
    if name == "String":
        return _string_coercer(binary_seen)
    if name == "FixedString":
        (width,) = (a for a in t.args if isinstance(a, int))
        return _fixed_string_coercer(width)
    if name == "Date":
        return _date_coercer(label, DATE_RANGE)
    if name == "Date32":
        return _date_coercer(label, DATE32_RANGE)
    if name == "DateTime":
        return _datetime_coercer(label)
    if name == "DateTime64":
        precision = next((a for a in t.args if isinstance(a, int)), 3)
        return _datetime64_coercer(precision, label)
    if name == "UUID":
        return _uuid_coerce
    if name == "Bool":
        return _bool_coerce
    if name in ("Enum8", "Enum16"):
        return _enum_coercer(t)
    if name in ("Nullable", "LowCardinality"):
        return coercer_for(t, None)
    if name == "Array":
        return _array_coercer(coercer_for(t.inner))
    if name == "Map":
        key_t, val_t = t.type_args()
        return _map_coercer(coercer_for(key_t), coercer_for(val_t))
    if name == "Tuple":
        elements = t.type_args()
        return _tuple_coercer(
            [coercer_for(e) for e in elements],
            [e.field for e in elements],
            [e.nullable for e in elements],
        )
    if name == "JSON":
        return json_coercer(t, coercer_for, BadValue)
    if name == "Variant":
        return variant_coercer(t, coercer_for, BadValue, INT_RANGES)
    if name == "Dynamic":
        return dynamic_coercer(BadValue, _date_coercer("Date32", DATE32_RANGE))
    return _identity


def is_checked(t: ChType) -> bool:
    """Whether values of this type are checked (others pass through unchecked)."""
    return _value_coercer(t.unwrapped(), None) is not _identity
