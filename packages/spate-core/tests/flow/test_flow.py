"""Byte budget, pause hysteresis and the pending gate (B6, B7)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate.flow import Hysteresis, InflightBudget, PendingGate
from spate.records import Lane
from spate.testing import ManualClock


def test_budget_counts_across_threads() -> None:
    budget = InflightBudget(1000)

    def worker() -> None:
        for _ in range(2000):
            budget.acquire(3)
            budget.release(3)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.used == 0
    budget.acquire(1500)
    assert budget.ratio == 1.5  # acquire never blocks and may go over the limit


def test_budget_refuses_a_non_positive_limit() -> None:
    with pytest.raises(ValueError, match="max_inflight_bytes"):
        InflightBudget(0)


def test_b7_pauses_at_high_ratio_and_resumes_under_low_after_min_pause() -> None:
    clock = ManualClock()
    h = Hysteresis(limit=100, high_ratio=0.8, low_ratio=0.5, min_pause=1.0, clock=clock)
    assert not h.update(79)
    assert h.update(80)
    assert h.update(60)  # between low and high: stays paused
    assert h.update(10)  # under low, but min_pause not over
    clock.advance(1.0)
    assert not h.update(10)
    assert h.pauses == 1


@settings(max_examples=100, deadline=None)
@given(levels=st.lists(st.tuples(st.integers(0, 120), st.floats(0, 0.5)), max_size=40))
def test_b7_hysteresis_never_resumes_above_low_nor_pauses_below_high(
    levels: list[tuple[int, float]],
) -> None:
    clock = ManualClock()
    h = Hysteresis(limit=100, high_ratio=0.9, low_ratio=0.4, min_pause=0.2, clock=clock)
    paused = False
    since = clock.monotonic()
    for used, step in levels:
        clock.advance(step)
        now_paused = h.update(used)
        if not paused and now_paused:
            assert used >= 90
            since = clock.monotonic()
        if paused and not now_paused:
            assert used < 40 and clock.monotonic() - since >= 0.2
        if not paused and not now_paused:
            assert used < 90
        paused = now_paused


def test_b6_gate_closes_exactly_the_lanes_at_the_bound() -> None:
    gate = PendingGate(3)
    a, b = Lane("t", 0), Lane("t", 1)
    assert gate.closed({a: 3, b: 2}) == {a}
    assert gate.closed({a: 2, b: 5}) == {b}
    with pytest.raises(ValueError):
        PendingGate(0)
