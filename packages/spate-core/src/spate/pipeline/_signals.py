"""SIGTERM and SIGINT start the drain (B14).

:class:`ShutdownHandle` is a thread-safe stop request. :func:`install_signal_handlers`
points SIGTERM and SIGINT at it while a run is in progress, only when called on the main
thread (Python delivers signals there), and restores the previous handlers afterwards.
The handler only records the request and wakes the pipeline thread; the drain itself
runs on the pipeline thread.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

logger = logging.getLogger(__name__)

_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class ShutdownHandle:
    """A stop request that signals, services and tests can raise."""

    def __init__(self, wake: threading.Event | None = None) -> None:
        self._event = threading.Event()
        self._wake = wake
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        """Ask the pipeline to drain and stop (any thread, signal-safe)."""
        if self.reason is None:
            self.reason = reason
        self._event.set()
        if self._wake is not None:
            self._wake.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()


def install_signal_handlers(handle: ShutdownHandle) -> Callable[[], None]:
    """Route SIGTERM/SIGINT to ``handle``; return a function restoring the old handlers.

    Does nothing (and returns a no-op) off the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, _Handler] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if handle.requested:
            logger.warning("%s received again; drain already in progress", name)
        handle.request(f"signal {name}")

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.getsignal(sig)
        signal.signal(sig, on_signal)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    return restore
