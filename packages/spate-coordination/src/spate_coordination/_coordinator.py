"""The coordinator for a pipeline process: :class:`Coordinator`, a thread-safe, blocking
facade over :class:`~spate_coordination._core.CoordinatorCore` run on an I/O loop (the
process's, or a daemon thread's own).

What a source gets from it, and how fencing and the loops work, is described in
:mod:`spate_coordination._core`."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Coroutine, Iterable
from concurrent.futures import Future
from typing import TypeVar

from spate import Clock
from spate.metrics import Meter
from spate.plugins import BuildContext

from spate_coordination._core import CoordinatorCore
from spate_coordination._events import (
    Listener,
    OwnedSplit,
    ProgressWrite,
    SplitEvent,
)
from spate_coordination._records import (
    Progress,
    SplitSpec,
)
from spate_coordination._states import SplitState
from spate_coordination._store import (
    CoordinationError,
    CoordinationStore,
    StoreUnavailableError,
)
from spate_coordination.config import CoordinationConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _loop_thread_main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        # Nothing may be left pending on a closed loop: cancel, finish, then close.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


class Coordinator:
    """A coordinator for a pipeline process: a thread-safe, blocking API (B24).

    ``start()`` opens the store and joins (raising on a duplicate ``instance_id`` or an
    unreachable store), then runs the loops on ``loop`` — the process's I/O loop when
    given, else a loop in a daemon thread of its own. The blocking methods may be called
    from any thread except the loop's own; each waits at most ``timeout`` seconds.
    """

    def __init__(
        self,
        config: CoordinationConfig,
        store: CoordinationStore,
        *,
        clock: Clock | None = None,
        meter: Meter | None = None,
        component: str = "coordination",
        loop: asyncio.AbstractEventLoop | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.core = CoordinatorCore(config, store, clock=clock, meter=meter, component=component)
        self._given_loop = loop
        self._loop: asyncio.AbstractEventLoop | None = loop
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._runner: Future[None] | None = None
        self._timeout = timeout

    @classmethod
    def from_config(
        cls,
        config: CoordinationConfig,
        context: BuildContext,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> Coordinator:
        """A coordinator on the configured store, with the pipeline's meter and clock."""
        return cls(
            config,
            config.open_store(context),
            clock=context.clock,
            meter=context.meter,
            loop=loop,
        )

    # -- lifecycle

    def start(self) -> None:
        """Connect, join and start the loops; raise what joining raised."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()
            thread = threading.Thread(
                target=_loop_thread_main,
                args=(loop, ready),
                name=f"spate-coordination-{self.core.instance_id}",
                daemon=True,
            )
            thread.start()
            ready.wait()
            self._loop, self._thread = loop, thread
        try:
            self._call(self.core.start(), timeout=None)
        except BaseException:
            self._stop_thread()
            raise

        # Created here, not inside the coroutine, so that a stop() right after start()
        # always has an event to set (an Event binds to a loop only when awaited).
        self._stop = asyncio.Event()
        self._runner = asyncio.run_coroutine_threadsafe(
            self.core.run(self._stop), self._require_loop()
        )

    def stop(self, *, release: bool = True) -> None:
        """Stop the loops and leave the job (releasing owned splits unless told not to)."""
        loop = self._loop
        if loop is None:
            return
        if self._stop is not None:
            loop.call_soon_threadsafe(self._stop.set)
            self._stop = None
        if self._runner is not None:
            try:
                self._runner.result(self._timeout)
            except Exception:
                logger.warning("coordination loops did not stop cleanly", exc_info=True)
            self._runner = None
        try:
            self._call(self.core.close(release=release))
        except CoordinationError as exc:
            logger.warning("stopping coordination cleanly failed: %s", exc)
        finally:
            self._stop_thread()

    def _stop_thread(self) -> None:
        loop, thread = self._loop, self._thread
        if thread is not None and loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(self._timeout)
            self._loop, self._thread = self._given_loop, None

    def __enter__(self) -> Coordinator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise CoordinationError("the coordinator is not started")
        return self._loop

    def _call(self, coro: Coroutine[object, object, T], timeout: float | None = -1.0) -> T:
        loop = self._require_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise CoordinationError(
                "blocking Coordinator methods cannot run on the coordinator's own event "
                "loop; await the CoordinatorCore methods (Coordinator.core) there instead"
            )
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        wait = self._timeout if timeout is not None and timeout < 0 else timeout
        try:
            return future.result(wait)
        except TimeoutError as exc:
            future.cancel()
            raise StoreUnavailableError(
                f"coordination store {self.core.store.endpoint} did not answer in {wait}s"
            ) from exc

    # -- the API a source uses

    @property
    def instance_id(self) -> str:
        return self.core.instance_id

    @property
    def job_complete(self) -> bool:
        """True once every planned split is completed."""
        return self.core.job_complete

    def is_leader(self) -> bool:
        return self.core.is_leader()

    def owned(self) -> dict[str, OwnedSplit]:
        """The splits this instance owns now, with their epochs. Never blocks."""
        return self.core.owned()

    def take_events(self) -> list[SplitEvent]:
        """Notifications since the last call, oldest first. Never blocks."""
        return self.core.take_events()

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` on the loop thread for each notification; must not block."""
        self.core.add_listener(listener)

    def publish_plan(self, specs: Iterable[SplitSpec]) -> bool:
        """Publish the split plan (blocking); see :meth:`CoordinatorCore.publish_plan`."""
        return self._call(self.core.publish_plan(list(specs)))

    def read_plan(self) -> list[SplitSpec] | None:
        return self._call(self.core.read_plan())

    def commit_progress(self, split: str, epoch: int, progress: Progress) -> ProgressWrite:
        """Fenced progress write (blocking): ``FENCED`` once the split is not ours (B24)."""
        return self._call(self.core.commit_progress(split, epoch, progress))

    def read_progress(self, split: str) -> Progress | None:
        return self._call(self.core.read_progress(split))

    def mark_completed(self, split: str, epoch: int) -> ProgressWrite:
        return self._call(self.core.mark_completed(split, epoch))

    def release(self, split: str, epoch: int) -> bool:
        """Give a drained split up (answer to ``REVOKE_REQUESTED``). Blocking."""
        return self._call(self.core.release(split, epoch))

    def quarantine(self, split: str, epoch: int, reason: str) -> ProgressWrite:
        """Set a split aside that cannot be read (blocking); see
        :meth:`CoordinatorCore.quarantine`."""
        return self._call(self.core.quarantine(split, epoch, reason))

    def split_states(self) -> dict[str, SplitState]:
        """Every split's status, epoch, owner, progress and quarantine reason (blocking)."""
        return self._call(self.core.split_states())

    def retry_quarantined(self, splits: Iterable[str] | None = None) -> list[str]:
        """Clear the quarantine of ``splits`` (or of every quarantined split), keeping
        their progress; returns the splits cleared. Blocking."""
        return self._call(self.core.retry_quarantined(None if splits is None else list(splits)))

    def wait_job_complete(self, timeout: float) -> bool:
        """Block until the job is complete or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        while not self.core.job_complete:
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.1, self.core.config.poll_interval))
        return True


__all__ = ["Coordinator"]
