"""The seam between the runtime and a compiled operator chain.

The runtime polls a batch, registers it with the partition tracker (getting its
:class:`~spate.checkpoint.AckToken`, which starts with one hold: the chain's), then calls
:meth:`BatchProcessor.process`. The processor deserializes each payload, runs the fused
operators and offers every output row to its sink with the batch's ack.

* It returns ``None`` when the whole batch is processed; the runtime then releases the
  chain's hold (``ack.release(True)``).
* It returns :class:`Stalled` when it cannot go on right now: a sink answered
  ``Offer.REJECTED`` (``reason="sink_full"``) or the deserializer said a record is not
  ready yet (``reason="not_ready"``, B21). The runtime keeps polling with intake paused
  and later calls ``process(batch, ack, resume=stalled.cursor)``, which continues from
  exactly the record (and flat_map child) where it stopped, so no operator runs twice on
  a record (B8).
* A record error under the ``fail`` policy raises :class:`~spate.errors.FatalError`; the
  runtime fails the ack and the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from spate.checkpoint._ack import AckToken
from spate.records import PayloadBatch


@dataclass(frozen=True, slots=True)
class Stalled:
    """Processing stopped early; hand ``cursor`` back to resume at the same record."""

    cursor: object
    reason: Literal["sink_full", "not_ready"]
    sink: str | None = None
    """The sink that refused a row (for ``sink_full``)."""


@runtime_checkable
class BatchProcessor(Protocol):
    """One compiled chain: payload batch in, rows offered to sinks. Runtime-checkable:
    ``Pipeline(processor=...)`` takes a processor or a factory of one (B230)."""

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        """Process ``batch`` from the start (or from ``resume``). Runs on the pipeline thread."""
        ...


@runtime_checkable
class ReportsSkips(Protocol):
    """A processor that logs the records it skips at a limited rate (B42): the runtime
    calls :meth:`report_skips_due` on its periodic turn, so a count whose interval has
    passed is logged even when no later skip comes."""

    def report_skips_due(self) -> None:
        """Log every skip count whose interval has passed. Pipeline thread."""
        ...
