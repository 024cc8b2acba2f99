"""The coordination store protocol: six primitives over two keyspaces.

Owns the seam every store implements (in-memory, NATS JetStream KV, third-party stores
registered under the ``spate.coordination_stores`` entry-point group) and the errors
the coordination layer raises. Does not own any coordination logic: membership,
leadership, assignment and fencing are built on these primitives elsewhere.

The six primitives, all asynchronous (they run on the coordinator's event loop):

* ``create`` — create-if-absent; returns the new revision, or ``None`` if the key exists;
* ``compare_and_set`` — write only if the key's current revision is the given one;
  returns the new revision, or ``None`` when the revision is stale or the key is gone;
* ``delete`` — guarded delete: only if the current revision is the given one;
* ``get`` — the current entry or ``None``;
* ``list`` — every live entry under a prefix;
* ``watch`` — an async iterator of changes under a prefix (a *hint*: see below).

Expected outcomes (the key exists, the revision is stale) are results, not exceptions.
An unreachable store raises :class:`StoreUnavailableError`, which callers retry.

Two keyspaces: :attr:`Keyspace.DURABLE` keeps entries until deleted;
:attr:`Keyspace.TTL` drops an entry ``ttl`` seconds after its last write (leases and
heartbeats). A store does not promise a watch event when a TTL entry expires (NATS 2.9
sends none), so whoever needs to see expiries must also poll with ``list``.

Keys are dot-separated tokens of ``[A-Za-z0-9_-]`` (``assign.s-01``); a prefix is empty
or ends with a dot. These rules are what NATS KV accepts and what its subject wildcards
can filter on, so every store enforces them alike. Upholds B24 (the compare-and-set is
what fencing is built on).
"""

from __future__ import annotations

import enum
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from spate.errors import SpateError

_TOKEN = r"[A-Za-z0-9_-]+"
_KEY_RE = re.compile(rf"^{_TOKEN}(\.{_TOKEN})*$")
_PREFIX_RE = re.compile(rf"^({_TOKEN}\.)*$")
TOKEN_RE = re.compile(rf"^{_TOKEN}$")
"""One key token: what instance ids, job names and split ids may contain."""


class CoordinationError(SpateError):
    """Root of the errors raised by spate-coordination."""


class StoreUnavailableError(CoordinationError):
    """The store could not be reached or did not answer in time; retrying may help."""


class DuplicateInstanceError(CoordinationError):
    """Another live instance of the same job already uses this ``instance_id`` (B24)."""


class PlanConflictError(CoordinationError):
    """A different split plan is already published for this job."""


class Keyspace(enum.Enum):
    """Where a key lives."""

    DURABLE = "durable"
    """Kept until deleted: plan, assignments, split state and progress."""
    TTL = "ttl"
    """Dropped ``ttl`` seconds after its last write: heartbeats and the leader lease."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A key's current value and revision (revisions grow with every write)."""

    key: str
    value: bytes
    revision: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change under a watched prefix; ``value`` is ``None`` when the key was deleted."""

    key: str
    value: bytes | None
    revision: int


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid store key, else raise ``ValueError``."""
    if not _KEY_RE.match(key):
        raise ValueError(f"invalid coordination key {key!r}: use dot-separated [A-Za-z0-9_-]")
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is empty or dot-terminated tokens, else raise ``ValueError``."""
    if not _PREFIX_RE.match(prefix):
        raise ValueError(f"invalid coordination prefix {prefix!r}: empty or ending with '.'")
    return prefix


def check_token(kind: str, value: str) -> str:
    """Return ``value`` if it is a single key token, else raise ``ValueError`` naming ``kind``."""
    if not TOKEN_RE.match(value):
        raise ValueError(f"{kind} {value!r} may only contain letters, digits, '_' and '-'")
    return value


@runtime_checkable
class CoordinationStore(Protocol):
    """A key-value store with revisions, one durable and one TTL keyspace.

    Every method runs on the coordinator's event loop and may wait on the network;
    none is safe to call from another thread. ``ttl`` is the TTL keyspace's lifetime
    in seconds (the lease duration).
    """

    @property
    def ttl(self) -> float:
        """Seconds a TTL-keyspace entry lives after its last write."""
        ...

    @property
    def endpoint(self) -> str:
        """Where the store lives, for log lines and error messages."""
        ...

    async def open(self) -> None:
        """Connect and make sure both keyspaces exist; raise naming the endpoint (B29)."""
        ...

    async def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""
        ...

    async def create(self, space: Keyspace, key: str, value: bytes) -> int | None:
        """Create ``key`` if absent; the new revision, or ``None`` when it exists."""
        ...

    async def compare_and_set(
        self, space: Keyspace, key: str, value: bytes, revision: int
    ) -> int | None:
        """Write if the current revision is ``revision``; new revision or ``None``."""
        ...

    async def delete(self, space: Keyspace, key: str, revision: int) -> bool:
        """Delete if the current revision is ``revision``; whether it was deleted."""
        ...

    async def get(self, space: Keyspace, key: str) -> Entry | None:
        """The current entry, or ``None`` if absent, deleted or expired."""
        ...

    async def list(self, space: Keyspace, prefix: str) -> list[Entry]:
        """Every live entry whose key starts with ``prefix`` (sorted by key)."""
        ...

    def watch(self, space: Keyspace, prefix: str) -> AsyncIterator[WatchEvent]:
        """Changes under ``prefix`` from now on, until the iterator is closed.

        A hint only: TTL expiries may send nothing, and a reconnect may lose events.
        """
        ...
