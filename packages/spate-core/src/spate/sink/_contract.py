"""The sink contract as the runtime and the operator chain see it.

The chain hands each output row to :meth:`Sink.offer` together with the ack token of
the source batch it came from. A sink that accepts a row becomes a holder of that token
(``ack.retain(holder)`` once per buffer and batch) and later releases it with
``ack.release(ok, holder=holder)``: ``ok=True`` once the buffer is durably written,
``ok=False`` when it is abandoned or failed fatally (B2, B4, B39). A holder keeping
single rows counts them with :class:`~spate.checkpoint.AckHolds`. A sink that cannot
take more answers :attr:`Offer.REJECTED`; the chain then stops where it is and the
runtime pauses intake and offers the same row again later (B7, B8).

Sinks compose: a sink that wraps another (a spool tier, a tee) implements this same
protocol and forwards rows and acks.

On revocation the runtime needs only the revoked lanes' rows written (B15). A sink that
can tell which buffers hold them implements :class:`LaneFlushingSink`
(``flush_lanes``); the runtime calls it through :func:`flush_lanes`, which falls back to
a full :meth:`Sink.flush` for a sink that does not (B40).
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from typing import Final, Protocol

from spate.checkpoint._ack import AckToken
from spate.records import Lane


class Offer(enum.Enum):
    """Result of :meth:`Sink.offer`."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"


# The members as module constants for per-row code: on Python 3.11 every ``Offer.ACCEPTED``
# goes through the enum class's attribute lookup (about 70 ns, a tenth of a pooled offer).
ACCEPTED: Final = Offer.ACCEPTED
REJECTED: Final = Offer.REJECTED


class Sink(Protocol):
    """A destination for rows; everything below this seam belongs to the sink."""

    name: str

    def start(self) -> None:
        """Connect and probe every endpoint; raise ``SinkError`` naming it on failure (B29)."""
        ...

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """Take one row for writing, or refuse it for now. Never blocks.

        A value that cannot be encoded raises ``SinkError`` with ``ErrorClass.RECORD``;
        the chain applies the record error policy to it.
        """
        ...

    def tick(self) -> None:
        """Checkpoint tick: seal partial buffers so their acks can resolve (B10)."""
        ...

    def flush(self, deadline: float) -> bool:
        """Seal every buffer and wait until all are written or ``deadline`` (monotonic).

        Returns True when nothing is left unwritten. Called on drain, and on revocation
        when the sink has no ``flush_lanes`` (:class:`LaneFlushingSink`).
        """
        ...

    def abandon(self) -> int:
        """Fail the acks of everything not yet written (B4); return how many rows."""
        ...

    def ready(self) -> bool:
        """Whether the sink's probe passed (feeds ``/readyz``)."""
        ...

    def close(self) -> None:
        """Stop workers. Anything still held is failed first (B4)."""
        ...


class LaneFlushingSink(Sink, Protocol):
    """A sink that can write out the rows of some lanes only (B40)."""

    def flush_lanes(self, lanes: Collection[Lane], deadline: float) -> bool:
        """Seal the buffers holding rows of ``lanes`` and wait until those are written or
        ``deadline`` (monotonic). Buffers holding no row of ``lanes`` stay open.

        Returns True when no row of ``lanes`` is left unwritten (rows of other lanes
        sharing a buffer with them are written along). Called on revocation; blocks.
        """
        ...


def flush_lanes(sink: Sink, lanes: Collection[Lane], deadline: float) -> bool:
    """Write out what ``sink`` holds of ``lanes``: its ``flush_lanes`` when it has one,
    else everything (:meth:`Sink.flush`, for sinks written without per-lane flush)."""
    by_lane = getattr(sink, "flush_lanes", None)
    if by_lane is None:
        return sink.flush(deadline)
    done: bool = by_lane(lanes, deadline)
    return done
