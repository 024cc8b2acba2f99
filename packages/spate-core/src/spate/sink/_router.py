"""Routing rows to shards: FNV-1a of the message key, placed by the shards' weights (B13).

The default :class:`WeightedHashRouter` hashes the record's key with 64-bit FNV-1a and
takes the hash modulo the sum of the shard weights; shard *i* owns the interval
``[w0 + … + w(i-1), w0 + … + wi)`` of that range. The result depends only on the key
bytes and the configured weights, so every process on every machine routes the same key
to the same shard (Python's own ``hash()`` is salted per process and is never used).
Keyless records are spread by their lane's partition number through the same
intervals. Connectors may supply another :class:`Router` (a ClickHouse-compatible
weighted xxHash64 of a column for Distributed-table parity, say).

A router sees what it places by: the row (a router that places by a column of the row
reads it there), the record's key and the lane. :attr:`Router.placed_by` names the
column it reads (``None``: the record key), so a path that holds whole columns instead
of rows can hand the router that one column at once through :meth:`Router.route_column`
and get the same placement as row by row — one contract for both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from spate.records import Lane

FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF

_CACHE_LIMIT = 1 << 16


def fnv1a_64(data: bytes) -> int:
    """64-bit FNV-1a of ``data``."""
    h = FNV64_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & _MASK64
    return h


class Router(Protocol):
    """Chooses the shard of a row from the row itself, its record's key and its lane.

    A router may also have a ``start()`` method: the pool calls it once, after every
    endpoint's probe passed and before any row is offered (a router that needs the
    destination's column types learns them there); an error it raises fails start-up.
    """

    @property
    def placed_by(self) -> str | None:
        """The column the router places by, or ``None`` when it places by the record key."""
        ...

    def route(self, row: object, key: bytes | None, lane: Lane) -> int:
        """The shard index for one row. Called on the pipeline thread for every row.

        A row the router cannot place (its column missing or of the wrong type) raises
        ``SinkError(RECORD)``: the chain applies the record policy and nothing is held.
        """
        ...

    def route_column(self, values: Sequence[object], lane: Lane) -> list[int]:
        """The shard of each value of one column of rows of ``lane``, in order: the values
        of :attr:`placed_by`, or the record keys when it is ``None``. Equal, value for
        value, to :meth:`route` on the rows holding them (B13)."""
        ...


@runtime_checkable
class StartingRouter(Protocol):
    """A :class:`Router` with a ``start()`` the pool calls once, after every endpoint's
    probe passed and before any row is offered; an error it raises fails start-up."""

    def start(self) -> None:
        """Learn what the router needs from the destination (may block)."""
        ...


class WeightedHashRouter:
    """Hash of the key modulo the total weight, through each shard's weight interval."""

    __slots__ = ("_cache", "_hash", "_slots", "total")

    placed_by: str | None = None

    def __init__(self, weights: Sequence[int], hash_fn: Callable[[bytes], int] = fnv1a_64) -> None:
        if not weights:
            raise ValueError("a router needs at least one shard")
        if any(w < 1 for w in weights):
            raise ValueError(f"shard weights must be at least 1, got {list(weights)}")
        self.total = sum(weights)
        # slot -> shard, one entry per unit of weight: placement is a list lookup.
        self._slots: list[int] = [i for i, w in enumerate(weights) for _ in range(w)]
        self._hash = hash_fn
        self._cache: dict[bytes, int] = {}

    def shard_of_hash(self, h: int) -> int:
        """The shard owning hash value ``h``."""
        return self._slots[h % self.total]

    def route_column(self, values: Sequence[object], lane: Lane) -> list[int]:
        route = self.route
        return [route(None, key, lane) for key in values]  # type: ignore[arg-type]

    def route(self, row: object, key: bytes | None, lane: Lane) -> int:
        if key is None:
            return self._slots[lane.partition % self.total]
        cache = self._cache
        shard = cache.get(key)
        if shard is None:
            shard = self._slots[self._hash(key) % self.total]
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[key] = shard
        return shard
