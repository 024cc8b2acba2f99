"""The bisection of a refused block, on a fake server (B191, B192).

The server here refuses any range holding one of the ``bad`` rows; the search must find
exactly those rows, insert every other row once, stay within about two inserts per level
for each bad row, stop at the cap, and make the same inserts under the same tokens every
time it runs on the same block (a replay after a crash).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate_clickhouse._isolate import CapReached, Refused, isolate, sub_token


class _Server:
    def __init__(self, bad: set[int], fail_after: int | None = None) -> None:
        self.bad = bad
        self.calls: list[tuple[int, int, str]] = []
        self.kept: dict[str, range] = {}  # token -> rows (deduplicated by token)
        self.fail_after = fail_after

    def insert(self, start: int, stop: int, token: str) -> None:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise ConnectionError("the link went away")
        self.calls.append((start, stop, token))
        refused = sorted(self.bad.intersection(range(start, stop)))
        if refused:
            raise Refused(469, f"row {refused[0]} violates the constraint")
        self.kept.setdefault(token, range(start, stop))

    def rows(self) -> list[int]:
        return sorted(i for kept in self.kept.values() for i in kept)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=5000).flatmap(
        lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), min_size=1, max_size=8))
    )
)
def test_b191_the_search_finds_exactly_the_bad_rows_within_the_bound(
    case: tuple[int, set[int]],
) -> None:
    rows, bad = case
    server = _Server(bad)
    found, inserts = isolate(rows, Refused(469, "block"), server.insert, "t", cap=10_000)
    assert [r.row for r in found] == sorted(bad)
    assert all(r.code == 469 for r in found)
    assert server.rows() == [i for i in range(rows) if i not in bad]
    assert inserts == len(server.calls)
    assert inserts <= len(bad) * 2 * max(1, math.ceil(math.log2(rows)))


def test_b191_the_search_stops_at_the_cap() -> None:
    server = _Server({3, 300, 600, 900})
    with pytest.raises(CapReached) as caught:
        isolate(1000, Refused(469, "block"), server.insert, "t", cap=10)
    assert caught.value.inserts == 10 == len(server.calls)


def test_b192_a_replay_makes_the_same_inserts_under_the_same_tokens() -> None:
    bad = {17, 700}
    crashed = _Server(bad, fail_after=7)
    with pytest.raises(ConnectionError):  # the process dies in the middle of the search
        isolate(1000, Refused(469, "block"), crashed.insert, "lane-0-0-999", cap=100)
    replay = _Server(bad)
    replay.kept = dict(crashed.kept)  # what had landed stays, keyed by its token
    isolate(1000, Refused(469, "block"), replay.insert, "lane-0-0-999", cap=100)
    assert crashed.calls == replay.calls[: len(crashed.calls)]
    assert replay.rows() == [i for i in range(1000) if i not in bad]  # nothing twice
    assert sub_token("lane-0-0-999", 0, 500) == "lane-0-0-999:0-500"


def test_b190_a_single_row_block_is_the_refused_row() -> None:
    found, inserts = isolate(1, Refused(6, "cannot parse"), _Server(set()).insert, "t", 5)
    assert [(r.row, r.code, r.message) for r in found] == [(0, 6, "cannot parse")]
    assert inserts == 0
