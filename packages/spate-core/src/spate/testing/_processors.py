"""Small batch processors for tests of the runtime, standing in for a compiled chain.

:class:`CopyToSinkProcessor` copies every payload (``bytes(view)``, or its text) and
offers it to one sink with the batch's ack. It honours the processor contract: on
``Offer.REJECTED`` it returns :class:`~spate.ops.Stalled` with the index of the refused
record and the row already made from it, and resumes by offering that same row again, so
the transform never runs twice on a record (B8). It is a test helper, not an operator chain: real
pipelines use ``Pipeline.chains(fn)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spate.checkpoint._ack import AckToken
from spate.ops._contract import Stalled
from spate.records import PayloadBatch
from spate.sink._contract import Offer, Sink


@dataclass(frozen=True, slots=True)
class _Cursor:
    index: int
    row: object


class CopyToSinkProcessor:
    """Offers a copy of each payload to ``sink``; counts what it saw."""

    def __init__(
        self,
        sink: Sink,
        *,
        as_text: bool = False,
        transform: Callable[[memoryview], object] | None = None,
    ) -> None:
        self.sink = sink
        if transform is None:
            transform = _as_text if as_text else bytes
        self._transform = transform
        self.records_processed = 0
        self.transforms = 0
        self.calls = 0

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        self.calls += 1
        offer = self.sink.offer
        transform = self._transform
        lane = batch.lane
        keys = batch.keys
        payloads = batch.payloads
        start = 0
        if isinstance(resume, _Cursor):
            if offer(resume.row, keys[resume.index], lane, ack) is Offer.REJECTED:
                return Stalled(cursor=resume, reason="sink_full", sink=self.sink.name)
            self.records_processed += 1
            start = resume.index + 1
        for i in range(start, len(payloads)):
            row = transform(payloads[i])
            self.transforms += 1
            if offer(row, keys[i], lane, ack) is Offer.REJECTED:
                return Stalled(cursor=_Cursor(i, row), reason="sink_full", sink=self.sink.name)
            self.records_processed += 1
        return None


def _as_text(view: memoryview) -> str:
    return str(view, "utf-8")
