"""Rows the server rejects, isolated by bisection (B190-B193; docs/adr/0017).

When ClickHouse refuses a whole block for a *data* error — a value it cannot parse or
convert, a ``CHECK`` constraint, a string too large (:data:`ISOLABLE_CODES`, by the
server's exception code) — the writer does not fail the block at once: it inserts the
two halves of the block separately, then the halves of each half that is refused, down
to single rows. The rows refused alone are the offending rows; every other row has been
inserted. Transport errors and overload are never isolated: they stay retryable (B12).

The search is a function of the block alone: the order is depth first, left half
first, and a sub-block's dedup token is the block's token followed by its row range
(:func:`sub_token`). Under ``effectively_once`` the block's token derives from its
recorded intent, so a replay after a crash rebuilds the same block, meets the same
refusals and inserts the same sub-blocks under the same tokens: the sub-blocks that had
landed are dropped by ClickHouse's deduplication and the search carries on where it
stopped (B192).

Bounded (B191): each offending row costs at most two inserts per level, about
``2·log2(n)`` for a block of ``n`` rows, and ``isolate_max_inserts`` caps the inserts
of one block; past it the block fails as it did without isolation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from spate_clickhouse._errors import TYPE_CODES

SCHEMA_TYPE_CODES = frozenset({43, 53})
"""``ILLEGAL_TYPE_OF_ARGUMENT`` and ``TYPE_MISMATCH``: fatal type codes that are not
bisected (they name a column's type rather than a value of one row)."""

ISOLABLE_CODES: dict[int, str] = {
    code: name for code, name in TYPE_CODES.items() if code not in SCHEMA_TYPE_CODES
}
"""Server codes that name a value of some row, not the block, the table or the link: a
block refused with one of these is bisected. Every one of them is fatal for the whole
block (:mod:`spate_clickhouse._errors`)."""


class Refused(Exception):
    """A (sub-)block the server refused with an isolable code (raised by the insert)."""

    def __init__(self, code: int, message: str, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.error = error
        """What the refusal is when it is not isolated (the block's error as it was)."""


class Rejected(NamedTuple):
    """One row the server refused on its own: its index in the block, code and message."""

    row: int
    code: int
    message: str


class CapReached(Exception):
    """``isolate_max_inserts`` inserts were spent before every offending row was found."""

    def __init__(self, inserts: int, found: list[Rejected]) -> None:
        super().__init__(f"isolation stopped after {inserts} inserts")
        self.inserts = inserts
        self.found = found


Insert = Callable[[int, int, str], None]
"""``insert(start, stop, token)`` inserts rows ``[start, stop)`` of the block with
``token``; raises :class:`Refused` for an isolable refusal, anything else otherwise."""


def sub_token(token: str, start: int, stop: int) -> str:
    """The dedup token of rows ``[start, stop)`` of the block whose token is ``token``."""
    return f"{token}:{start}-{stop}"


def isolate(
    rows: int, first: Refused, insert: Insert, token: str, cap: int
) -> tuple[list[Rejected], int]:
    """Find the rows of a refused block the server refuses on their own.

    ``first`` is the refusal of the whole block. Returns the rejected rows (in block
    order) and the number of inserts made; every other row has been inserted. Raises
    :class:`CapReached` when ``cap`` inserts were made and a refused range is left, and
    whatever ``insert`` raises that is not :class:`Refused` (a transport error: the
    caller retries the whole block, whose sub-blocks then deduplicate).
    """
    if rows == 1:
        return [Rejected(0, first.code, first.message)], 0
    rejected: list[Rejected] = []
    inserts = 0
    stack: list[tuple[int, int]] = [(0, rows)]  # refused ranges still to split
    while stack:
        start, stop = stack.pop()
        middle = (start + stop) // 2
        refused: list[tuple[int, int]] = []
        for lo, hi in ((start, middle), (middle, stop)):
            if inserts >= cap:
                raise CapReached(inserts, rejected)
            inserts += 1
            try:
                insert(lo, hi, sub_token(token, lo, hi))
            except Refused as exc:
                if hi - lo == 1:
                    rejected.append(Rejected(lo, exc.code, exc.message))
                else:
                    refused.append((lo, hi))
        stack.extend(reversed(refused))  # left half first
    return rejected, inserts
