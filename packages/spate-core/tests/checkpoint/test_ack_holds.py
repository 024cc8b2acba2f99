"""AckHolds and release_all: row-by-row holders keep one hold per token (B2, B4, B39)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spate.checkpoint import AckHolds, AckStatus, AckToken, PartitionTracker, release_all
from spate.errors import AckError
from spate.records import Lane, PayloadBatch
from spate.testing import ManualClock

LANE = Lane("t", 0)


def _tokens(count: int) -> list[AckToken]:
    tracker = PartitionTracker(ManualClock())
    tracker.assign([LANE])
    tokens = []
    for i in range(count):
        batch = PayloadBatch(
            lane=LANE,
            offsets=[i],
            payloads=[memoryview(b"x")],
            keys=[None],
            timestamps=[0],
            next_offset=i + 1,
        )
        token = tracker.register(batch)
        tokens.append(token)
    return tokens


@given(
    rows=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=40),
)
def test_b39_row_holds_resolve_each_token_once_after_its_last_row(
    rows: list[tuple[int, bool]],
) -> None:
    """Rows of four tokens interleave in any order; each token resolves only when its
    last held row is done, failed if any of its rows failed."""
    tokens = _tokens(4)
    holds = AckHolds("memory tier")
    for index, _ in rows:
        holds.add(tokens[index])
    for token in tokens:
        token.release()  # the chain is done; the tier still holds what it took
    for index, ok in rows:
        assert tokens[index].status is AckStatus.PENDING
        holds.done(tokens[index], ok)
    for index, token in enumerate(tokens):
        mine = [ok for i, ok in rows if i == index]
        if not mine:
            assert token.status is AckStatus.DELIVERED
        else:
            expected = AckStatus.DELIVERED if all(mine) else AckStatus.FAILED
            assert token.status is expected
        assert token.fault is None


def test_b39_a_row_done_that_was_never_held_is_a_fault() -> None:
    (token,) = _tokens(1)
    holds = AckHolds("tee")
    with pytest.raises(AckError):
        holds.done(token)
    assert token.fault is not None


def test_b4_release_all_releases_every_token_even_when_one_raises() -> None:
    tokens = _tokens(3)
    for token in tokens:
        token.retain("buffer")
    tokens[1].release(holder="buffer")  # a buggy early release: the next one raises
    release_all(tokens, True, "buffer")
    for token in tokens:
        token.release()
    assert tokens[0].status is AckStatus.DELIVERED
    assert tokens[2].status is AckStatus.DELIVERED
    assert tokens[1].status is AckStatus.FAILED
