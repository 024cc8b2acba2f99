"""Fault injection state of one front process.

A fault is one of:

* ``5xx``: answer every matching request with an HTTP error (default 503 and
  ``Code: 439 CANNOT_SCHEDULE_TASK``; ``status`` and ``code`` may be chosen);
* ``slow``: hold every matching request for ``delay`` seconds (default 30) before running
  it, so a client timeout fires first while the statement still runs afterwards, as on an
  overloaded server;
* ``drop``: read the request, then reset the connection without an answer;
  ``when=after`` runs the statement first (the write lands, the client never hears);
* ``refuse``: close the listening socket and every open connection, so new connections
  are refused; the same port is listened on again on recovery.

A fault lasts ``seconds`` (then recovers by itself), or for ``count`` matching requests, or
until recovered through the control endpoint or SIGUSR1. ``only`` narrows which requests
match: ``all`` (default), ``insert`` (INSERT statements) or ``query`` (anything else).
``5xx`` never applies to ``/ping``: a server whose queries fail still answers its ping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from ._errors import CANNOT_SCHEDULE_TASK

Mode = Literal["none", "5xx", "slow", "drop", "refuse"]
RequestKind = Literal["ping", "insert", "query"]
MODES: tuple[Mode, ...] = ("5xx", "slow", "drop", "refuse")


class FaultSpecError(ValueError):
    """A control request named an unknown mode or an invalid parameter."""


@dataclass(frozen=True, slots=True)
class Fault:
    mode: Mode = "none"
    deadline: float | None = None  # time.monotonic() at which the fault ends
    remaining: int | None = None  # matching requests still to affect
    status: int = 503
    code: int = CANNOT_SCHEDULE_TASK
    delay: float = 30.0
    when: Literal["before", "after"] = "before"
    only: Literal["all", "insert", "query"] = "all"

    def matches(self, kind: RequestKind) -> bool:
        if self.mode == "none":
            return False
        if kind == "ping":
            return self.mode != "5xx" and self.only == "all"
        return self.only in ("all", kind)

    def describe(self) -> dict[str, object]:
        left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        return {
            "mode": self.mode,
            "seconds_left": left,
            "count_left": self.remaining,
            "status": self.status,
            "code": self.code,
            "delay": self.delay,
            "when": self.when,
            "only": self.only,
        }


def _number(params: Mapping[str, str], key: str, kind: Callable[[str], float], low: float) -> float:
    raw = params[key]
    try:
        value = kind(raw)
    except ValueError as exc:
        raise FaultSpecError(f"{key} must be a number, got {raw!r}") from exc
    if value < low:
        raise FaultSpecError(f"{key} must be >= {low}, got {raw!r}")
    return value


def parse_fault(params: Mapping[str, str]) -> Fault:
    """Build a Fault from control-request parameters (``mode``, ``seconds``, ``count``...)."""
    mode = params.get("mode", "")
    if mode not in MODES:
        raise FaultSpecError(f"mode must be one of {', '.join(MODES)} or recover, got {mode!r}")
    fault = Fault(mode=mode)
    if "seconds" in params:
        seconds = _number(params, "seconds", float, 0.0)
        fault = replace(fault, deadline=time.monotonic() + seconds)
    if "count" in params:
        fault = replace(fault, remaining=int(_number(params, "count", int, 1)))
    if "status" in params:
        status = int(_number(params, "status", int, 100))
        if not 500 <= status <= 599:
            raise FaultSpecError(f"status must be a 5xx code, got {status}")
        fault = replace(fault, status=status)
    if "code" in params:
        fault = replace(fault, code=int(_number(params, "code", int, 1)))
    if "delay" in params:
        fault = replace(fault, delay=_number(params, "delay", float, 0.0))
    when = params.get("when", "before")
    if when not in ("before", "after"):
        raise FaultSpecError(f"when must be before or after, got {when!r}")
    only = params.get("only", "all")
    if only not in ("all", "insert", "query"):
        raise FaultSpecError(f"only must be all, insert or query, got {only!r}")
    if mode == "refuse" and (only != "all" or "count" in params):
        raise FaultSpecError("refuse affects every connection: only/count do not apply")
    return replace(fault, when=when, only=only)  # type: ignore[arg-type]


class FaultState:
    """The current fault, shared by request threads, the control endpoint and timers.

    Each installed fault has its own release event: recovering (control endpoint, signal
    or the ``seconds`` timer) sets it and so ends the pause of slow requests at once, while
    a fault that ends because its ``count`` is used up leaves its slow requests slow,
    until :meth:`release_held` (the ``release`` control action) lets every one go.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fault = Fault()
        self._generation = 0
        self._release = threading.Event()
        self._issued: list[threading.Event] = []
        self.affected = 0

    @property
    def current(self) -> Fault:
        with self._lock:
            self._expire_locked()
            return self._fault

    def set(self, fault: Fault) -> int:
        """Install ``fault`` (replacing any other); returns its generation number."""
        with self._lock:
            self._release.set()
            self._generation += 1
            self._fault = fault
            self._release = threading.Event()
            return self._generation

    def clear(self, generation: int | None = None) -> Fault | None:
        """Recover and return the fault that was active (None if there was none).

        With ``generation``, only if that fault is still the current one (timers).
        """
        with self._lock:
            if generation is not None and generation != self._generation:
                return None
            previous = self._fault
            self._reset_locked()
            return previous if previous.mode != "none" else None

    def take(self, kind: RequestKind) -> tuple[Fault, threading.Event] | None:
        """The fault for one request of ``kind`` and its release event (counts toward ``count``)."""
        with self._lock:
            self._expire_locked()
            fault = self._fault
            if not fault.matches(kind):
                return None
            release = self._release
            self._issued = [e for e in self._issued if not e.is_set()]
            self._issued.append(release)
            self.affected += 1
            if fault.remaining is not None:
                if fault.remaining <= 1:
                    self._generation += 1
                    self._fault = Fault()
                    self._release = threading.Event()
                else:
                    self._fault = replace(fault, remaining=fault.remaining - 1)
            return fault, release

    def release_held(self) -> None:
        """End the pause of every slow request held so far, whichever fault held it."""
        with self._lock:
            for release in self._issued:
                release.set()
            self._issued.clear()

    def _reset_locked(self) -> None:
        self._release.set()
        self._generation += 1
        self._fault = Fault()
        self._release = threading.Event()

    def _expire_locked(self) -> None:
        deadline = self._fault.deadline
        if deadline is not None and time.monotonic() >= deadline:
            self._reset_locked()
