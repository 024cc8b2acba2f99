"""Fuzz tests shared by the binary deserializers (Avro, Protobuf), B28.

Each package's fuzz module builds its ``decoders`` fixture (a name → deserializer map,
one of them ``confluent`` on a schema registry) and takes its tests from here: random
bytes behind each framing's prefixes give only ``DeserError``, and random batches
through the deserializer stage end as counted ``ok`` or ``skipped`` records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate import DeserError, DeserErrorKind

from tests.support.deser_stage import through_stage
from tests.support.scale import scaled

EXAMPLES = scaled(2000, minimum=200)


class _Decoder(Protocol):
    def deserialize(self, payload: memoryview) -> object: ...

    def close(self) -> None: ...


@contextmanager
def closing_all(built: Mapping[str, _Decoder]) -> Iterator[Mapping[str, _Decoder]]:
    """Yield ``built``, then close every decoder in it."""
    try:
        yield built
    finally:
        for deser in built.values():
            deser.close()


def decode_or_record_error(name: str, deser: _Decoder, view: memoryview) -> None:
    """Decode ``view``: a ``DeserError`` with a reason is fine, anything else raised fails.

    Only the registry decoder (``confluent``) may answer "not ready" (an id the registry
    has not answered for yet)."""
    try:
        deser.deserialize(view)
    except DeserError as exc:
        assert exc.reason
        if exc.kind is DeserErrorKind.NOT_READY:
            assert name == "confluent"


def random_bytes_test(prefixes: st.SearchStrategy[bytes]) -> Callable[..., None]:
    """The test: random bodies behind ``prefixes``, as bytes and as a slice of a larger
    buffer, into every decoder of the ``decoders`` fixture."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(prefix=prefixes, body=st.binary(max_size=64), sliced=st.booleans())
    def test(decoders: Mapping[str, _Decoder], prefix: bytes, body: bytes, sliced: bool) -> None:
        data = prefix + body
        buf = b"\xff" + data + b"\xff"
        view = memoryview(buf)[1 : 1 + len(data)] if sliced else memoryview(data)
        for name, deser in decoders.items():
            decode_or_record_error(name, deser, view)

    return test


def random_batches_test(decoder: str) -> Callable[..., None]:
    """The test: random batches through the stage with the ``decoder`` of the fixture;
    every payload ends as ``ok`` (and reaches the sink) or ``skipped``."""

    @settings(max_examples=max(20, EXAMPLES // 20), deadline=None)
    @given(payloads=st.lists(st.binary(max_size=40), min_size=1, max_size=30))
    def test(decoders: Mapping[str, Any], payloads: list[bytes]) -> None:
        counts = through_stage(decoders[decoder], payloads)
        assert counts.ok == len(counts.rows)
        assert counts.ok + counts.skipped == len(payloads)

    return test


def corrupt(
    draw: st.DrawFn,
    payloads: list[bytes],
    corruptions: Mapping[str, Callable[[bytes], bytes]],
    most: int,
) -> list[bytes]:
    """``payloads`` with up to ``most`` of them (drawn at random) passed through a
    randomly drawn corruption of ``corruptions``; the list is changed in place."""
    for index, kind in draw(
        st.lists(
            st.tuples(st.integers(0, len(payloads) - 1), st.sampled_from(sorted(corruptions))),
            max_size=most,
        )
    ):
        payloads[index] = corruptions[kind](payloads[index])
    return payloads


JSON_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False, allow_infinity=False),
    "text": st.text(max_size=8),
    "bool": st.booleans(),
    "maybe": st.none() | st.integers(-1000, 1000),
    "ints": st.lists(st.integers(-1000, 1000), max_size=3),
}
"""Strategies of JSON field values by kind, for random JSON records."""
