"""The commit gate across processes: a lease in the coordination store (``gate: coordination``).

With ``gate: coordination`` and the pipeline's top-level ``coordination`` section, writers
of one destination in any process take turns through a lease key in the store's TTL
keyspace (``parquet-gate.<hash of the destination>``): ``create`` takes it, ``delete``
with the taken revision gives it back, and a holder that stalls loses it when the
store's TTL (``coordination.lease_duration``) drops the key. A writer that cannot take it
within ``gate_timeout`` publishes without it — the manifest's compare-and-set keeps
concurrent publishes correct; the gate only keeps writers from racing.

Store calls are coroutines; the gate runs them on a private event loop from whichever
thread publishes (the sink's writer thread).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from spate.errors import ConfigError
from spate.sink.writebehind import CommitGate, CommitGates

if TYPE_CHECKING:
    from spate.plugins import BuildContext

logger = logging.getLogger(__name__)

T = TypeVar("T")
_POLL = 0.02


class StoreGate(CommitGate):
    """A :class:`CommitGate` that also holds a lease in the coordination store."""

    def __init__(self, destination: str, timeout: float, store: Any, *, gates: CommitGates) -> None:
        super().__init__(destination, timeout, gates=gates)
        digest = hashlib.sha256(destination.encode()).hexdigest()[:32]
        self.key = f"parquet-gate.{digest}"
        self._store = store
        self._owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}".encode()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        self._opened = False

    def _run(self, make: Coroutine[Any, Any, T]) -> T:
        with self._loop_lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(make)

    async def _acquire(self, deadline: float) -> int | None:
        from spate_coordination import Keyspace

        if not self._opened:
            await self._store.open()
            self._opened = True
        while True:
            revision: int | None = await self._store.create(Keyspace.TTL, self.key, self._owner)
            if revision is not None or time.monotonic() >= deadline:
                return revision
            await asyncio.sleep(_POLL)

    async def _release(self, revision: int) -> None:
        from spate_coordination import Keyspace

        await self._store.delete(Keyspace.TTL, self.key, revision)

    def run(self, commit: Callable[[], T]) -> T:
        def across_processes() -> T:
            deadline = time.monotonic() + self.timeout
            try:
                revision = self._run(self._acquire(deadline))
            except Exception:
                logger.warning(
                    "commit gate of %s: the coordination store failed; publishing without it",
                    self.destination,
                    exc_info=True,
                )
                revision = None
            else:
                if revision is None:
                    logger.warning(
                        "commit gate of %s held elsewhere longer than %.1fs; publishing without it",
                        self.destination,
                        self.timeout,
                    )
            try:
                return commit()
            finally:
                if revision is not None:
                    try:
                        self._run(self._release(revision))
                    except Exception:
                        # The lease expires by itself after the store's TTL.
                        logger.warning("commit gate of %s: release failed", self.destination)

        return super().run(across_processes)

    def close(self) -> None:
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            if self._opened:
                loop.run_until_complete(self._store.close())
        except Exception:
            logger.debug("closing the coordination store raised", exc_info=True)
        finally:
            loop.close()


def open_coordination_store(
    coordination: Mapping[str, object] | None, context: BuildContext
) -> Any:
    """The coordination store of the pipeline's ``coordination`` section (not yet open)."""
    if coordination is None:
        raise ConfigError(
            "gate",
            "gate: coordination needs the pipeline's top-level coordination section",
        )
    try:
        from spate_coordination.config import load_coordination_config
    except ImportError as exc:
        raise ConfigError(
            "gate",
            "gate: coordination needs spate-coordination: "
            'pip install "spate-parquet[coordination]"',
        ) from exc
    return load_coordination_config(coordination).open_store(context)
