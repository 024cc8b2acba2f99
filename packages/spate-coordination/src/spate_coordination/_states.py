"""The public view of a job's split states, and retrying quarantined splits.

Owns :class:`SplitStatus` and :class:`SplitState` (what a source or an operator sees of
one split, without the store's key layout) and two store-level operations that need no
membership in the job, so a tool can run them next to a running or stopped job:

* :func:`read_split_states` — every planned split with its status, epoch, owner,
  committed progress and, in quarantine, the reason;
* :func:`retry_quarantined` — clear the quarantine of some or all quarantined splits,
  keeping their progress, so that the leader hands them out again and their next owner
  resumes from the committed position.

A quarantined split is neither completed nor assigned: the job cannot complete while one
is left, and the instances that finished everything else end the run as failed, naming
it. Every write here is a compare-and-set on the split's state, so clearing a
quarantine never overwrites an owner's progress (B24). Does not own the decisions of the
leader or of the owners: see :mod:`spate_coordination._leader` and
:mod:`spate_coordination._core`.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection
from dataclasses import dataclass, replace

from spate_coordination._records import (
    SPLIT_PREFIX,
    STATE_PREFIX,
    Progress,
    StateRecord,
    key_tail,
)
from spate_coordination._store import CoordinationStore, Keyspace

logger = logging.getLogger(__name__)

_CAS_ROUNDS = 3


class SplitStatus(enum.Enum):
    """Where one split of the job stands."""

    PENDING = "pending"
    """Planned and not finished, with no owner right now (never started, or released)."""
    OWNED = "owned"
    """An instance works it."""
    COMPLETED = "completed"
    """Every record is committed; it is never handed out again."""
    QUARANTINED = "quarantined"
    """Reading it failed for good (see ``reason``); held with its progress until retried."""


@dataclass(frozen=True, slots=True)
class SplitState:
    """One split as the store holds it; ``progress`` is the last committed position."""

    split_id: str
    status: SplitStatus
    epoch: int = 0
    owner: str | None = None
    progress: Progress | None = None
    reason: str = ""
    """Why the split is quarantined; empty otherwise."""

    @property
    def settled(self) -> bool:
        """Completed or quarantined: nothing will read it in this run."""
        return self.status in (SplitStatus.COMPLETED, SplitStatus.QUARANTINED)

    @classmethod
    def from_record(cls, split_id: str, record: StateRecord) -> SplitState:
        if record.completed:
            status = SplitStatus.COMPLETED
        elif record.quarantined is not None:
            status = SplitStatus.QUARANTINED
        elif record.owner is not None:
            status = SplitStatus.OWNED
        else:
            status = SplitStatus.PENDING
        return cls(
            split_id,
            status,
            record.epoch,
            record.owner,
            record.progress,
            record.quarantined or "",
        )


async def read_split_states(store: CoordinationStore) -> dict[str, SplitState]:
    """Every split of the job (planned ones without a state yet are ``PENDING``).

    ``store`` must be open. Raises :class:`~spate_coordination.CoordinationError` when
    the store cannot be reached and ``ValueError`` on a corrupt record.
    """
    planned = await store.list(Keyspace.DURABLE, SPLIT_PREFIX)
    states = {
        split: SplitState(split, SplitStatus.PENDING)
        for split in (key_tail(e.key, SPLIT_PREFIX) for e in planned)
    }
    for entry in await store.list(Keyspace.DURABLE, STATE_PREFIX):
        split = key_tail(entry.key, STATE_PREFIX)
        states[split] = SplitState.from_record(split, StateRecord.decode(entry.value))
    return dict(sorted(states.items()))


async def retry_quarantined(
    store: CoordinationStore, splits: Collection[str] | None = None
) -> list[str]:
    """Clear the quarantine of ``splits`` (every quarantined split when ``None``).

    The progress stays, so the next owner resumes from the committed position; a split
    that is not quarantined is left alone. Returns the splits cleared, sorted. ``store``
    must be open; raises ``CoordinationError`` when it cannot be reached.
    """
    cleared: list[str] = []
    for entry in await store.list(Keyspace.DURABLE, STATE_PREFIX):
        split = key_tail(entry.key, STATE_PREFIX)
        if splits is not None and split not in splits:
            continue
        current = entry
        for _ in range(_CAS_ROUNDS):
            state = StateRecord.decode(current.value)
            if state.quarantined is None or state.completed:
                break
            retried = replace(state, owner=None, quarantined=None)
            written = await store.compare_and_set(
                Keyspace.DURABLE, current.key, retried.encode(), current.revision
            )
            if written is not None:
                logger.info(
                    "split %s: quarantine cleared (was: %s); it is read again from its "
                    "committed position",
                    split,
                    state.quarantined,
                )
                cleared.append(split)
                break
            again = await store.get(Keyspace.DURABLE, current.key)
            if again is None:
                break
            current = again
    return sorted(cleared)
