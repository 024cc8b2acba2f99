"""Record headers: every pair kept in order, a mapping view over them (B250), and the
metadata names a sink column may take (B252)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spate import Headers, MetaSource
from spate.records import NO_HEADERS, Lane, PayloadBatch

# Odd inputs on purpose: bytes that are not UTF-8, empty values, None values (a header
# Kafka carries without a value), empty and repeated keys.
_keys = st.sampled_from(["", "tenant", "trace", "ünï", "a.b"]) | st.text(max_size=4)
_values = st.none() | st.binary(max_size=6) | st.sampled_from([b"", b"\xff\xfe", b"\x00"])
_pairs = st.lists(st.tuples(_keys, _values), max_size=12)


@given(_pairs)
def test_b250_headers_keep_every_pair_in_order_and_map_each_key_to_its_last_value(
    pairs: list[tuple[str, bytes | None]],
) -> None:
    headers = Headers.of(pairs)
    assert headers.pairs == tuple(pairs)
    expected: dict[str, bytes | None] = {}
    for key, value in pairs:
        expected[key] = value
    # The mapping: distinct keys in first-seen order, each with its last value.
    assert list(headers) == list(dict.fromkeys(k for k, _ in pairs))
    assert dict(headers) == expected
    assert len(headers) == len(expected)
    for key in expected:
        assert headers[key] == expected[key]
        assert key in headers
        assert headers.get_all(key) == tuple(v for k, v in pairs if k == key)
    assert headers.get("\x00absent") is None
    assert headers.get_all("\x00absent") == ()
    with pytest.raises(KeyError):
        headers["\x00absent"]
    assert headers == Headers(pairs) and hash(headers) == hash(Headers(pairs))


def test_b250_no_headers_is_shared_and_empty() -> None:
    assert Headers.of(None) is NO_HEADERS and Headers.of([]) is NO_HEADERS
    assert len(NO_HEADERS) == 0 and NO_HEADERS.pairs == ()


def test_b250_headers_are_read_only() -> None:
    headers = Headers([("a", b"1")])
    with pytest.raises(TypeError):
        headers["a"] = b"2"  # type: ignore[index]


def test_b251_a_batch_without_a_header_reader_gives_every_record_no_headers() -> None:
    lane = Lane("t", 0)
    views = [memoryview(b"a"), memoryview(b"b")]
    batch = PayloadBatch(lane, [0, 1], views, [None, None], [0, 0], 2)
    assert batch.headers == [NO_HEADERS, NO_HEADERS]
    calls: list[int] = []

    def read() -> list[Headers]:
        calls.append(1)
        return [Headers([("h", b"x")])]

    lazy = PayloadBatch.lazy(
        lane,
        [b"a"],
        first_offset=0,
        next_offset=1,
        offsets=[0],
        keys=[None],
        timestamps=[0],
        headers=read,
    )
    assert not calls  # nothing is read until asked for
    assert lazy.headers[0]["h"] == b"x" and lazy.headers[0]["h"] == b"x"
    assert calls == [1]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("$offset", MetaSource("offset")),
        (" $partition ", MetaSource("partition")),
        ("$timestamp", MetaSource("timestamp")),
        ("$timestamp_ms", MetaSource("timestamp_ms")),
        ("$topic", MetaSource("topic")),
        ("$key", MetaSource("key")),
        ("$value", MetaSource("value")),
        ("$header.tenant", MetaSource("header", "tenant")),
        ("$header.a.b", MetaSource("header", "a.b")),
    ],
)
def test_b252_metadata_names_parse(text: str, parsed: MetaSource) -> None:
    assert MetaSource.parse(text) == parsed
    assert MetaSource.parse(str(parsed)) == parsed


@pytest.mark.parametrize("text", ["$offsets", "$header.", "$", "offset", "$Key"])
def test_b252_an_unknown_metadata_name_is_refused_naming_the_known_ones(text: str) -> None:
    with pytest.raises(ValueError, match=r"unknown record metadata .*\$offset.*\$header\.<name>"):
        MetaSource.parse(text)
