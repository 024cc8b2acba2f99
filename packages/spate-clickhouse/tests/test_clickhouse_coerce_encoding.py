"""Whatever a column's check accepts, clickhouse-connect can encode (B28).

The point of checking per record is that a bad value never reaches the block encoder,
where it would fail the whole batch without a server error code. For every supported
type, hypothesis throws a wide mix of Python values at the column's check; every value it
accepts goes into one column, which clickhouse-connect's Native encoder must then encode
without error (no server needed: the encoding is client-side).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from clickhouse_connect.datatypes.registry import get_from_name
from clickhouse_connect.driver.insert import InsertContext
from clickhouse_connect.driver.transform import NativeTransform
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate_clickhouse import parse_type
from spate_clickhouse._coerce import BadValue, coercer_for

from tests.support.chfront import alltypes
from tests.support.scale import scaled

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**130), max_value=2**130),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=False, places=4),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.dates(),
    st.datetimes(timezones=st.none() | st.just(dt.UTC)),
    st.uuids(),
    st.sampled_from(["red", "green", "blue", "low", "high", "2020-01-01", "1e3", "12"]),
)
_values = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=3),
    st.tuples(_scalars, _scalars),
    st.dictionaries(st.text(max_size=4), _scalars, max_size=3),
)

TYPES = [t for _, t in alltypes.COLUMNS] + ["Decimal(76, 20)", "DateTime64(9)", "Date32"]


def _encode(type_name: str, column: list[object]) -> BaseException | None:
    ch_type = get_from_name(type_name)
    context = InsertContext("t", ["c"], [ch_type], [column], column_oriented=True)
    try:
        for _ in NativeTransform().build_insert(context):
            pass
    except Exception as exc:  # the encoder raised instead of recording
        return exc
    return context.insert_exception


@pytest.mark.parametrize("type_name", TYPES)
@settings(
    max_examples=scaled(200, minimum=20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(values=st.lists(_values, min_size=1, max_size=25))
def test_b28_values_a_check_accepts_always_encode(type_name: str, values: list[object]) -> None:
    binary = [False]
    coerce = coercer_for(parse_type(type_name), binary)
    accepted: list[object] = []
    for value in values:
        try:
            accepted.append(coerce(value))
        except BadValue:
            continue
    if not accepted:
        return
    if binary[0]:  # as the buffer sends a String column that met non-UTF-8 bytes
        accepted = [v.encode() if isinstance(v, str) else v for v in accepted]
    assert _encode(type_name, accepted) is None, (type_name, accepted)


def test_the_checked_forms_of_every_type_encode_together() -> None:
    for row in alltypes.rows(50):
        for (name, type_name), value in zip(alltypes.COLUMNS, row, strict=True):
            written = coercer_for(parse_type(type_name), [False])(value)
            assert _encode(type_name, [written]) is None, name


def test_a_wrong_value_would_fail_the_encoder_which_is_why_it_is_checked() -> None:
    # the failure mode the per-record checks prevent: the whole block fails to encode
    assert _encode("UInt8", [1, 300]) is not None
    assert _encode("String", ["a", 5]) is not None
    assert _encode("UUID", [uuid.uuid4(), "not a uuid"]) is not None
    assert _encode("Decimal(9, 2)", [Decimal("1e20")]) is not None
