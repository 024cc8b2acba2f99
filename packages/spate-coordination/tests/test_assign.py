"""Property tests of the pure assignment function (B24: deterministic, exclusive,
balanced within one split's weight, sticky under unchanged membership)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate_coordination import assign
from spate_coordination._assign import loads

from tests.support.scale import scaled

split_ids = st.text(alphabet="abcdefghij0123456789-", min_size=1, max_size=6)
weights = st.one_of(st.integers(1, 20).map(float), st.floats(0.1, 10.0))
split_maps = st.dictionaries(split_ids, weights, max_size=60)
worker_sets = st.sets(st.text(alphabet="wxyz0123", min_size=1, max_size=3), max_size=8)


def _balanced(splits: dict[str, float], result: dict[str, str], workers: set[str]) -> bool:
    if not splits or not workers:
        return True
    per = {w: 0.0 for w in workers} | loads(splits, result)
    return max(per.values()) - min(per.values()) <= max(splits.values()) + 1e-6


@settings(max_examples=scaled(300, minimum=60), deadline=None)
@given(split_maps, worker_sets)
def test_b24_every_split_goes_to_exactly_one_live_worker(
    splits: dict[str, float], workers: set[str]
) -> None:
    result = assign(splits, workers)
    if not workers:
        assert result == {}
        return
    assert set(result) == set(splits)
    assert set(result.values()) <= workers


@settings(max_examples=scaled(300, minimum=60), deadline=None)
@given(split_maps, worker_sets, st.randoms(use_true_random=False))
def test_b24_assignment_is_deterministic_whatever_the_input_order(
    splits: dict[str, float], workers: set[str], rnd: random.Random
) -> None:
    items = list(splits.items())
    rnd.shuffle(items)
    order = list(workers)
    rnd.shuffle(order)
    assert assign(dict(items), order) == assign(splits, sorted(workers))


@settings(max_examples=scaled(300, minimum=60), deadline=None)
@given(split_maps, worker_sets, st.data())
def test_b24_balanced_within_one_split_weight_from_any_start(
    splits: dict[str, float], workers: set[str], data: st.DataObject
) -> None:
    # Start from an arbitrary (possibly lopsided, possibly stale) current assignment.
    owners = sorted(workers | {"gone"})
    current = {s: data.draw(st.sampled_from(owners)) for s in splits}
    result = assign(splits, workers, current)
    assert _balanced(splits, result, workers)


@settings(max_examples=scaled(300, minimum=60), deadline=None)
@given(split_maps, worker_sets)
def test_b24_sticky_under_unchanged_membership(splits: dict[str, float], workers: set[str]) -> None:
    first = assign(splits, workers)
    assert assign(splits, workers, first) == first


@settings(max_examples=scaled(200, minimum=40), deadline=None)
@given(split_maps, worker_sets, st.text(alphabet="wxyz0123", min_size=4, max_size=4))
def test_b24_a_joining_worker_only_takes_splits_it_needs(
    splits: dict[str, float], workers: set[str], newcomer: str
) -> None:
    before = assign(splits, workers)
    after = assign(splits, workers | {newcomer}, before)
    assert _balanced(splits, after, workers | {newcomer})
    # Every split that moved went to the newcomer: the others keep what they had.
    moved = {s for s in splits if before.get(s) != after[s]}
    assert all(after[s] == newcomer for s in moved)


def test_b24_dead_workers_splits_are_spread_and_the_rest_stay() -> None:
    splits = {f"s{i:02d}": 1.0 for i in range(60)}
    before = assign(splits, ["a", "b", "c"])
    assert sorted(loads(splits, before).values()) == [20.0, 20.0, 20.0]
    after = assign(splits, ["a", "c"], before)
    assert sorted(loads(splits, after).values()) == [30.0, 30.0]
    for split, owner in before.items():
        if owner != "b":
            assert after[split] == owner


def test_weights_must_be_positive() -> None:
    with pytest.raises(ValueError, match="weight"):
        assign({"s1": 0.0}, ["a"])
