"""Acknowledgement tokens: one per source batch, resolved explicitly (B2, B4).

A token counts its *holders*: the chain while the batch is being processed, plus every
sink buffer that holds at least one record derived from the batch. Each holder calls
:meth:`AckToken.retain` once when it starts holding and :meth:`AckToken.release` once
when it is done (``ok=False`` when its records were abandoned or failed). When the count
reaches zero the token resolves and calls its resolver exactly once: DELIVERED if every
release was ok, FAILED if any was not (the worst status wins).

Resolution never relies on garbage collection or ``__del__``. Tokens are thread-safe:
sink worker threads release while the pipeline thread retains.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

from spate.records import Lane


class AckStatus(enum.Enum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


Resolver = Callable[["AckToken"], None]


class AckToken:
    """The acknowledgement of one source batch.

    Created by the partition tracker with one holder (the chain). The runtime releases
    that first hold once the chain has finished with the batch.
    """

    __slots__ = (
        "_holders",
        "_lock",
        "_ok",
        "_resolver",
        "epoch",
        "lane",
        "next_offset",
        "records",
        "seq",
        "status",
    )

    def __init__(
        self,
        lane: Lane,
        epoch: int,
        seq: int,
        next_offset: int,
        records: int,
        resolver: Resolver,
    ) -> None:
        self.lane = lane
        self.epoch = epoch
        self.seq = seq
        self.next_offset = next_offset
        self.records = records
        self.status = AckStatus.PENDING
        self._holders = 1
        self._ok = True
        self._resolver = resolver
        self._lock = threading.Lock()

    def retain(self) -> None:
        """Add a holder. Called by a sink buffer when it first takes a record of this batch."""
        with self._lock:
            if self.status is not AckStatus.PENDING:
                raise RuntimeError(f"retain on a resolved ack ({self.lane} seq {self.seq})")
            self._holders += 1

    def release(self, ok: bool = True) -> None:
        """Drop a holder; ``ok=False`` fails the batch. Resolves when the last holder leaves."""
        with self._lock:
            if self.status is not AckStatus.PENDING:
                raise RuntimeError(f"release on a resolved ack ({self.lane} seq {self.seq})")
            if not ok:
                self._ok = False
            self._holders -= 1
            if self._holders > 0:
                return
            self.status = AckStatus.DELIVERED if self._ok else AckStatus.FAILED
        self._resolver(self)

    @property
    def holders(self) -> int:
        with self._lock:
            return self._holders

    def __repr__(self) -> str:
        return (
            f"AckToken({self.lane}, epoch={self.epoch}, seq={self.seq}, "
            f"next_offset={self.next_offset}, {self.status.value})"
        )
