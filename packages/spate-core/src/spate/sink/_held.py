"""Record errors of held rows: a row a sink accepted that the sink after it refuses as bad (B111).

A memory tier holds rows until its flush policy fires, and a tee keeps a row that one
branch refused for room in that branch's backlog. Neither can tell yet whether the sink
after it can encode the row: a refusal for room (``REJECTED``) comes before encoding.
When that sink later raises ``SinkError(RECORD)`` for the held row, the error belongs to
the row's own record — not to the record the chain is offering at that moment, nor to
no record at all (a checkpoint tick, a drain). A sink that holds rows is therefore a
:class:`HoldingSink`: the chain binds it to a :class:`HeldErrors` for its sink index
(:func:`bind_held_errors`), and the holder

* notes, at every offer, :meth:`HeldErrors.origin` — the record whose row is being
  offered: the chain sets it per record, and a holder handing a held row on sets it to
  that row's origin (:meth:`HeldErrors.at`), so a holder after it notes the right one;
* on a record error for a held row calls :func:`charge` with the row's origin and
  source ack: the chain applies the sink's ``on_record_error`` to that record, once —
  counted and logged as skipped under its own position (``skip``), raised as a
  ``FatalError`` naming it (``fail``; the holder fails the row's ack first), or written
  to the dead-letter sink with its own payload, error and ack (``dead_letter``). A dead
  letter the dead-letter sink refuses for now comes back as a :class:`PendingDeadLetter`;
  the holder offers it again before handing anything else on (B7, B8), so it is
  counted and written once.

The held row then leaves the holder, and its hold on the source ack is released: a
skipped or dead-lettered record counts as handled (its offsets may be committed, B28,
B71). A holder that was never bound (built and offered by hand, or a custom processor
that does not bind) fails the row's source ack instead (B4) and logs the error; it never
raises the error into another record's offer.

A holder keeps a reference to each held row's source batch (for a dead letter's payload
and timestamp) until the row is handed on.

A spool tier binds the sink after it to a :class:`HeldErrors` over a cell of its own:
it hands on rows whose records are gone (acknowledged, or read back from disk), so it
notes for each a record it makes of the spooled row (B323).

A sink pool whose connector refuses rows at write time (``RowRefusingConnector``) is a
holder too: its batches keep their rows' records — only their positions when the policy
needs no dead letter (:attr:`HeldErrors.positions_only`, ``skip``, B349) — and a row the
destination refused is charged through :meth:`HeldErrors.report` on the pipeline thread
(B245-B249). A pool whose
connector never does binds nothing and tells the chain so (``bind_held_errors`` returns
False).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from spate.checkpoint._ack import AckToken
from spate.errors import FatalError, SinkError
from spate.records import PayloadBatch
from spate.sink._contract import Sink

logger = logging.getLogger(__name__)

Origin = tuple[PayloadBatch, int]
"""A row's record: its source batch and the record's index in it."""


class PendingDeadLetter:
    """The dead letter of a held row that the dead-letter sink refused for now."""

    __slots__ = ("ack", "origin", "row")

    def __init__(self, row: object, origin: Origin, ack: AckToken) -> None:
        self.row = row
        self.origin = origin
        self.ack = ack


ReportFn = Callable[[Origin, SinkError, AckToken], object | None]
"""Applies the policy to a held row's record; returns the dead letter still to offer."""
AgainFn = Callable[[object, Origin, AckToken], bool]
"""Offers a dead letter again; False while the dead-letter sink refuses it."""


class RecordCell:
    """The record whose rows are being offered now (set by the chain per record)."""

    __slots__ = ("batch", "index", "records")

    def __init__(self) -> None:
        self.batch: PayloadBatch | None = None
        self.index = -1
        self.records: Sequence[int] | None = None
        """The record of each row of the source batch's rows being handed to a sink at
        once (``prepare_rows``), when the chain collected them (B95); else None."""


class HeldErrors:
    """The chain's record error policy for one sink's held rows (see the module docstring)."""

    __slots__ = ("_again", "_kept", "_report", "_source", "cell", "positions_only")

    def __init__(
        self, cell: RecordCell, report: ReportFn, again: AgainFn, *, positions_only: bool = False
    ) -> None:
        self.cell = cell
        self._report = report
        self._again = again
        self.positions_only = positions_only
        """The policy needs only where a record was, not the record (``skip``, ``fail``):
        a holder keeps each row's source position, not its source batch (B349)."""
        self._source: PayloadBatch | None = None
        self._kept: PayloadBatch | None = None

    def kept(self) -> PayloadBatch | None:
        """What a holder keeps of the source batch being offered now: the batch itself,
        or under :attr:`positions_only` a batch of its lane and offsets alone
        (:meth:`~spate.records.PayloadBatch.positions`, made once per source batch; the
        last source batch stays referenced until the next one, so that one is never
        mistaken for another)."""
        batch = self.cell.batch
        if batch is None or not self.positions_only:
            return batch
        if batch is not self._source:
            self._source = batch
            self._kept = batch.positions()
        return self._kept

    def origin(self) -> Origin | None:
        """The record whose row is being offered now (None outside the chain)."""
        cell = self.cell
        batch = cell.batch
        return None if batch is None else (batch, cell.index)

    def at(self, origin: Origin | None) -> Origin | None:
        """Make ``origin`` the record being offered; return the one it replaces."""
        cell = self.cell
        before = self.origin()
        if origin is None:
            cell.batch = None
        else:
            cell.batch, cell.index = origin
        return before

    def report(self, origin: Origin, exc: SinkError, ack: AckToken) -> PendingDeadLetter | None:
        """Apply the policy to ``origin``'s record (``FatalError`` under ``fail``)."""
        row = self._report(origin, exc, ack)
        return None if row is None else PendingDeadLetter(row, origin, ack)

    def offer_again(self, pending: PendingDeadLetter) -> bool:
        """Offer a refused dead letter again; True once the dead-letter sink took it."""
        return self._again(pending.row, pending.origin, pending.ack)


@runtime_checkable
class HoldingSink(Sink, Protocol):
    """A sink that accepts rows before the sink after it has encoded them (B111)."""

    def bind_held_errors(self, errors: HeldErrors) -> bool | None:
        """Report the record errors of held rows to ``errors`` (and bind the sinks after
        it that hold rows too). Called once by the chain, before the first offer.
        Returns False when the sink turns out to hold no rows that way (a sink pool
        whose connector never refuses rows at write time, B249): the chain then notes
        no record per offer for it."""
        ...


def bind_held_errors(sink: Sink, errors: HeldErrors) -> bool:
    """Bind ``sink`` to ``errors`` when it holds rows (:class:`HoldingSink`); whether
    it does."""
    if not isinstance(sink, HoldingSink):
        return False
    return sink.bind_held_errors(errors) is not False


class Charged(enum.Enum):
    """What became of a held row's record error (when no dead letter waits)."""

    HANDLED = "handled"
    """Skipped or dead-lettered: release the hold on the row's source ack as delivered."""
    FAILED = "failed"
    """No chain policy to apply (an unbound holder): fail the row's source ack (B4)."""


def charge(
    errors: HeldErrors | None,
    origin: Origin | None,
    exc: SinkError,
    ack: AckToken,
    holder: str,
) -> Charged | PendingDeadLetter:
    """Charge a held row's record error to its own record (see the module docstring).

    Raises ``FatalError`` under ``fail``: the caller fails the row's ack and lets it
    propagate. Pipeline thread.
    """
    if errors is None or origin is None:
        logger.error(
            "%s: the next sink refused a held row of %s as bad; its source batch fails: %s",
            holder,
            ack.lane,
            exc.reason,
        )
        return Charged.FAILED
    pending = errors.report(origin, exc, ack)
    return Charged.HANDLED if pending is None else pending


def settle(
    errors: HeldErrors | None,
    origin: Origin | None,
    exc: SinkError,
    ack: AckToken,
    holder: str,
    release: Callable[[bool], None],
) -> PendingDeadLetter | None:
    """:func:`charge` a held row already taken off its holder's queue, then ``release``
    the holder's hold on it (``ok`` as :class:`Charged` says; not ok before a
    ``FatalError`` propagates). Returns the dead letter still to offer: the hold stays
    until the holder offered it again. Pipeline thread."""
    try:
        outcome = charge(errors, origin, exc, ack, holder)
    except FatalError:
        release(False)
        raise
    if isinstance(outcome, PendingDeadLetter):
        return outcome
    release(outcome is Charged.HANDLED)
    return None
