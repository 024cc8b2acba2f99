"""A spool's process dying under ``kill -9``, in-process.

Owns: what the kernel does to a dead process's spool — it closes the open segment and
the directory's lock (B114) — without flushing, cutting or deleting anything, so a fresh
spool over the same directory recovers what a restarted process would.
"""

from __future__ import annotations

import os

from spate.sink import JsonlStore, SpoolTier


def died(spool: SpoolTier) -> None:
    """The process holding ``spool`` died (``kill -9``): the kernel closes its open
    segment and the directory's lock (B114); nothing is flushed, cut or deleted."""
    store = spool._store
    assert isinstance(store, JsonlStore)
    for fd in (store._file, store._owner):
        if fd is not None:
            os.close(fd)
    store._file = store._owner = None
