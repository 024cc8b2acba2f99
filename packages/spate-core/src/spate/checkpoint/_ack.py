"""Acknowledgement tokens: one per source batch, resolved explicitly (B2, B4).

A token knows its *holders*: the chain while the batch is being processed
(:data:`CHAIN`, the hold every token starts with), plus every sink buffer that holds at
least one record derived from the batch. Each holder calls :meth:`AckToken.retain`
with itself once when it starts holding and :meth:`AckToken.release` with itself once
when it is done (``ok=False`` when its records were abandoned or failed). When the last
holder has left the token resolves and calls its resolver exactly once: DELIVERED if
every release was ok, FAILED if any was not (the worst status wins).

Because the token knows who holds it, a holder that releases twice cannot take another
holder's place: the second release raises :class:`~spate.errors.AckError`, fails the
batch and is reported to the pipeline through ``on_fault``, which fails the run. A
counter of holders could only resolve the batch early and let a commit pass rows still
being written.

Resolution never relies on garbage collection or ``__del__``. Tokens are thread-safe:
sink worker threads release while the pipeline thread retains.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Final

from spate.errors import AckError
from spate.records import Lane

logger = logging.getLogger(__name__)


class AckStatus(enum.Enum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class _Chain:
    """The chain's hold: the holder a token starts with (one object per process)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "chain"


CHAIN: Final = _Chain()
"""The holder every token starts with: the runtime releases it (``ack.release()``)
once the chain has finished with the batch."""

Resolver = Callable[["AckToken"], None]
FaultHandler = Callable[["AckToken", str], None]


class AckToken:
    """The acknowledgement of one source batch.

    Created by the partition tracker held by :data:`CHAIN`. The runtime releases that
    first hold once the chain has finished with the batch. ``on_fault`` (optional) hears
    of every misuse: a release by a holder that does not hold the token (a second
    release), or a second retain by the same holder.
    """

    __slots__ = (
        "_held",
        "_lock",
        "_ok",
        "_on_fault",
        "_resolver",
        "epoch",
        "event_time",
        "failure",
        "fault",
        "lane",
        "next_offset",
        "records",
        "seq",
        "status",
        "written",
    )

    def __init__(
        self,
        lane: Lane,
        epoch: int,
        seq: int,
        next_offset: int,
        records: int,
        resolver: Resolver,
        on_fault: FaultHandler | None = None,
    ) -> None:
        self.lane = lane
        self.epoch = epoch
        self.seq = seq
        self.next_offset = next_offset
        self.records = records
        self.status = AckStatus.PENDING
        self.fault: str | None = None
        """The first misuse seen, or None."""
        self.failure: str | None = None
        """Why a holder failed this batch for good, set before its release: rows the
        destination refused on their own, which a retry would meet again (under
        ``on_record_error: fail``, or with no record to charge them to). None for any
        other failure (B322)."""
        self.event_time: float | None = None
        """Wall-clock seconds of the batch's oldest record timestamp, None when unknown
        (set by the tracker; freshness, B220)."""
        self.written: dict[tuple[str, str], float] | None = None
        """When each (sink, table) last wrote rows of this batch, wall-clock seconds
        (set by sink workers; written → committed, B221)."""
        self._held: set[Hashable] = {CHAIN}
        self._ok = True
        self._resolver = resolver
        self._on_fault = on_fault
        self._lock = threading.Lock()

    def retain(self, holder: Hashable) -> None:
        """Add ``holder`` (a sink buffer, batch or the sink itself): called once when it
        first takes a record of this batch. Raises ``AckError`` if it already holds."""
        with self._lock:
            if self.status is not AckStatus.PENDING:
                raise RuntimeError(f"retain on a resolved ack ({self.lane} seq {self.seq})")
            held = self._held
            if holder not in held:
                held.add(holder)
                return
            self._ok = False
            reason = self._fault(f"retained twice by {holder!r}")
        self._report(reason)

    def release(self, ok: bool = True, *, holder: Hashable = CHAIN) -> None:
        """``holder`` is done; ``ok=False`` fails the batch. Resolves when the last holder
        leaves. Without ``holder`` this releases the chain's hold (the runtime's call).

        A holder that does not hold the token — it already released, or never retained —
        raises ``AckError``: the batch is failed (it never resolves delivered on a
        miscount) and the fault is reported to the pipeline.
        """
        with self._lock:
            held = self._held
            if holder in held:
                held.remove(holder)
                if not ok:
                    self._ok = False
                if held:
                    return
                self.status = AckStatus.DELIVERED if self._ok else AckStatus.FAILED
                resolved = True
            else:
                self._ok = False
                if self.status is AckStatus.PENDING:
                    what = "released by"
                else:
                    what = f"released after it resolved {self.status.value}, by"
                reason = self._fault(f"{what} {holder!r}, which does not hold it (released twice?)")
                resolved = False
        if resolved:
            self._resolver(self)
        else:
            self._report(reason)

    def _fault(self, what: str) -> str:
        """Record a misuse (lock held); return its description."""
        reason = f"ack of {self.lane} batch {self.seq} {what}"
        if self.fault is None:
            self.fault = reason
        return reason

    def _report(self, reason: str) -> None:
        """Tell the pipeline, then the caller (lock not held)."""
        if self._on_fault is not None:
            self._on_fault(self, reason)
        raise AckError(reason)

    @property
    def holders(self) -> int:
        with self._lock:
            return len(self._held)

    def __repr__(self) -> str:
        return (
            f"AckToken({self.lane}, epoch={self.epoch}, seq={self.seq}, "
            f"next_offset={self.next_offset}, {self.status.value})"
        )


def release_all(acks: Iterable[AckToken], ok: bool, holder: Hashable) -> None:
    """Release every one of ``acks`` held by ``holder``, even when one raises (B4, B39).

    A release that raises (``AckError`` for a second release, which the token already
    reported to the pipeline, or a resolver's bug) is logged; stopping at the first
    would leave the rest held forever.
    """
    for ack in acks:
        try:
            ack.release(ok, holder=holder)
        except Exception:
            logger.exception("releasing %r for %r failed", ack, holder)


class AckHolds:
    """Row-by-row holds of one holder over many tokens (memory tiers, backlogs).

    A holder that keeps individual rows retains a token on its first row and releases
    it after its last, failed if any of its rows failed: each token sees one retain and
    one release from this holder, as B39 requires, however many rows it holds.
    """

    __slots__ = ("_holder", "_rows")

    def __init__(self, holder: Hashable) -> None:
        self._holder = holder
        self._rows: dict[AckToken, list[int | bool]] = {}

    def add(self, ack: AckToken) -> None:
        """One more row of ``ack`` is held."""
        entry = self._rows.get(ack)
        if entry is None:
            ack.retain(self._holder)
            self._rows[ack] = [1, True]
        else:
            entry[0] += 1

    def done(self, ack: AckToken, ok: bool = True) -> None:
        """One row of ``ack`` was handed on (``ok``) or failed; the last row releases."""
        entry = self._rows.get(ack)
        if entry is None:  # never held: let the token report the misuse
            ack.release(ok, holder=self._holder)
            return
        entry[0] -= 1
        if not ok:
            entry[1] = False
        if entry[0] == 0:
            del self._rows[ack]
            ack.release(bool(entry[1]), holder=self._holder)
