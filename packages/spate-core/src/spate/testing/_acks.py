"""Ack tokens for tests: :class:`AckRecorder` makes them and remembers how each resolved."""

from __future__ import annotations

from spate.checkpoint._ack import AckStatus, AckToken
from spate.records import Lane


class AckRecorder:
    """Makes ack tokens on one lane, as a source would for its consecutive batches, and
    records how each resolved.

    The n-th token has ``seq`` n and covers the next ``records`` offsets after
    ``first_offset``; :attr:`status` maps each token's ``seq`` to its final status and
    :attr:`resolved` lists the statuses in the order the tokens resolved.
    """

    def __init__(self, lane: Lane | None = None, *, first_offset: int = 0) -> None:
        self.lane = lane if lane is not None else Lane("t", 0)
        self.status: dict[int, AckStatus] = {}
        self.resolved: list[AckStatus] = []
        self._seq = 0
        self._offset = first_offset

    def new(self, records: int = 1) -> AckToken:
        """The next batch's token, covering ``records`` records."""
        self._seq += 1
        self._offset += records
        return AckToken(self.lane, 0, self._seq, self._offset, records, self._record)

    def _record(self, token: AckToken) -> None:
        self.status[token.seq] = token.status
        self.resolved.append(token.status)
