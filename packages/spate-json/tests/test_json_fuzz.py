"""Random bytes and random JSON into every framing: only ``DeserError`` comes out (B28)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate import NO_RECORD, DeserError, DeserErrorKind
from spate_json import JsonDeserializer

from tests.support.deser_stage import through_stage
from tests.support.scale import scaled

Build = Callable[[dict[str, Any]], JsonDeserializer]
EXAMPLES = scaled(1000, minimum=100)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _run(deser: JsonDeserializer, view: memoryview) -> list[object]:
    """Decode as the stage would; any exception other than DeserError fails the test."""
    try:
        out = deser.deserialize_many(view) if deser.many else [deser.deserialize(view)]
    except DeserError as exc:
        assert exc.kind is DeserErrorKind.MALFORMED and exc.reason
        return []
    for item in out:
        if isinstance(item, DeserError):
            assert item.kind is DeserErrorKind.MALFORMED and item.reason
    return [item for item in out if item is not NO_RECORD and not isinstance(item, DeserError)]


@FUZZ
@given(data=st.binary(max_size=80), sliced=st.booleans())
def test_random_bytes_give_only_record_errors_b28(
    build_json: Build, data: bytes, sliced: bool
) -> None:
    view = memoryview(b"{" + data + b"}")[1:-1] if sliced else memoryview(data)
    for framing in ("single", "ndjson", "array"):
        for top_level in ("object", "any"):
            _run(build_json({"framing": framing, "top_level": top_level}), view)


@FUZZ
@given(values=st.lists(json_values, min_size=1, max_size=5))
def test_random_json_decodes_or_is_a_record_error(build_json: Build, values: list[Any]) -> None:
    ndjson = b"\n".join(orjson.dumps(v) for v in values)
    decoded = _run(build_json({"framing": "ndjson", "top_level": "any"}), memoryview(ndjson))
    assert decoded == values
    objects = [v for v in values if isinstance(v, dict)]
    decoded = _run(build_json({"framing": "ndjson"}), memoryview(ndjson))
    assert decoded == objects
    array = _run(build_json({"framing": "array"}), memoryview(orjson.dumps(values)))
    assert array == (values if len(objects) == len(values) else [])


payload_parts = st.one_of(
    st.binary(max_size=30),
    json_values.map(orjson.dumps),
    st.sampled_from([b"", b"  ", b"{}", b'{"a": 1}']),
)


@settings(max_examples=max(20, EXAMPLES // 10), deadline=None)
@given(payloads=st.lists(payload_parts, min_size=1, max_size=30))
def test_random_batches_through_the_stage_are_all_counted_b28(
    build_json: Build, payloads: list[bytes]
) -> None:
    """Every payload ends as ``ok``, ``skipped`` or ``empty`` in the stage's counters."""
    counts = through_stage(build_json({}), payloads)
    assert counts.ok == len(counts.rows)
    assert all(type(row) is dict for row in counts.rows)
    assert counts.ok + counts.skipped + counts.empty == len(payloads)
