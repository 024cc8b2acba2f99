"""Tiers: sinks that hold rows in front of the next sink (memory, spool, tee).

A tier is a :class:`~spate.sink.Sink` whose next tier is another sink, usually a
:class:`~spate.sink.SinkPool`. The tiers sit above the pool: they import the pool's
contract (``spate.sink._contract``, ``_held``, ``_retry``) and nothing in the rest of
``spate.sink`` imports them. ``spate.sink`` re-exports the public names below.

Modules: ``_memory`` (the memory tier), ``_spool`` (the spool tier), ``_spool_writer``
(its writer thread), ``_spool_codec`` (its record encoding), ``_store`` (the segment
store), ``_tee`` (the tee) and ``_frames`` (what the tiers share for frames).
"""

from spate.sink.tiers._memory import MemoryTier, MemoryTierConfig
from spate.sink.tiers._spool import SpoolConfig, SpoolTier
from spate.sink.tiers._store import BatchRef, JsonlStore, SpoolCorruptError, SpoolStore, StoredBatch
from spate.sink.tiers._tee import TeeSink

__all__ = [
    "BatchRef",
    "JsonlStore",
    "MemoryTier",
    "MemoryTierConfig",
    "SpoolConfig",
    "SpoolCorruptError",
    "SpoolStore",
    "SpoolTier",
    "StoredBatch",
    "TeeSink",
]
