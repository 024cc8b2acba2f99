"""B17: the spellings the reference prints read back as the same values."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from spate.config import format_duration, format_size, parse_duration, parse_size


@given(st.integers(min_value=0, max_value=2**50))
def test_format_size_round_trips(size: int) -> None:
    assert parse_size(format_size(size)) == size


@given(st.integers(min_value=1, max_value=10**9))
def test_format_duration_round_trips_whole_milliseconds(millis: int) -> None:
    seconds = millis / 1000
    assert abs(parse_duration(format_duration(seconds)) - seconds) < 1e-9


def test_preferred_spellings() -> None:
    assert format_size(256 * 1024**2) == "256MiB"
    assert format_size(1_000_000) == "1MB"
    assert format_size(1500) == "1500"
    assert format_duration(0.1) == "100ms"
    assert format_duration(60.0) == "1m"
    assert format_duration(2.5) == "2500ms"
