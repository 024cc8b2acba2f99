"""Backoff and circuit-breaker rules on their own (B11, B12)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from spate.sink import Backoff, Breaker, BreakerConfig, BreakerState, RetryConfig


@given(
    initial=st.floats(0.001, 5.0),
    factor=st.floats(1.0, 50.0),
    multiplier=st.floats(1.0, 4.0),
    jitter=st.floats(0.0, 0.99),
    draw=st.floats(0.0, 0.999999),
    failures=st.integers(1, 5000),
)
def test_b12_backoff_is_capped_exponential_and_jitter_only_shortens(
    initial: float, factor: float, multiplier: float, jitter: float, draw: float, failures: int
) -> None:
    config = RetryConfig(
        initial=initial, max=initial * factor, multiplier=multiplier, jitter=jitter
    )
    backoff = Backoff(config, rng=lambda: draw)
    ceiling = backoff.ceiling(failures)
    assert initial <= ceiling <= config.max * (1 + 1e-12)
    assert backoff.ceiling(failures + 1) >= ceiling  # never shrinks as failures grow
    if failures < 20:
        expected = min(config.max, initial * multiplier ** (failures - 1))
        assert abs(ceiling - expected) <= 1e-9 * expected
    delay = backoff.delay(failures)
    assert ceiling * (1 - jitter) - 1e-12 <= delay <= ceiling


def test_b12_max_attempts_zero_never_exhausts() -> None:
    assert not Backoff(RetryConfig(max_attempts=0)).exhausted(10**9)
    limited = Backoff(RetryConfig(max_attempts=3))
    assert [limited.exhausted(n) for n in (1, 2, 3, 4)] == [False, False, True, True]


def test_b11_breaker_opens_after_threshold_probes_after_open_for_and_closes() -> None:
    changes: list[BreakerState] = []
    breaker = Breaker(
        BreakerConfig(failure_threshold=3, open_for=10.0, half_open_probes=2), "r", changes.append
    )
    now = 100.0
    for _ in range(2):
        breaker.acquire(now)
        breaker.failure(now)
    assert breaker.state is BreakerState.CLOSED
    breaker.success()  # a success resets the count of consecutive failures
    for _ in range(3):
        breaker.acquire(now)
        breaker.failure(now)
    assert breaker.state is BreakerState.OPEN
    assert not breaker.available(now + 9.999)
    assert breaker.reopens_at() == now + 10.0
    # After open_for: one trial at a time.
    assert breaker.available(now + 10.0)
    breaker.acquire(now + 10.0)
    assert breaker.state is BreakerState.HALF_OPEN
    assert not breaker.available(now + 10.0)
    breaker.success()
    assert breaker.state is BreakerState.HALF_OPEN  # needs two successful probes
    breaker.acquire(now + 10.0)
    breaker.success()
    assert breaker.state is BreakerState.CLOSED
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]


def test_b11_failed_probe_reopens_for_another_open_for() -> None:
    breaker = Breaker(BreakerConfig(failure_threshold=1, open_for=5.0), "r")
    breaker.acquire(0.0)
    breaker.failure(0.0)
    breaker.acquire(5.0)
    breaker.failure(5.0)
    assert breaker.state is BreakerState.OPEN
    assert not breaker.available(9.9)
    assert breaker.available(10.0)
