"""The polling source's checkpoint: its position and the keys it delivered (B76).

Owns :class:`Checkpoint`. Every record handed out gets the next offset of the source's
one lane and, with a key, stays *pending* until the runtime commits past its offset;
only then does its key join the *seen* keys that drop repeats for ``dedupe_window``.
A key pending or seen drops its repeats alike, so a reading is neither handed out twice
while its batch is in flight nor forgotten before it is delivered.

With a ``state_path`` each commit writes ``{"version", "next_offset", "tick", "seen"}``
to a temporary file in the same directory, fsyncs it and renames it over the old one:
a ``kill -9`` leaves the previous checkpoint or the new one, never a torn file. A
restart resumes the offsets and tick count and keeps dropping the seen keys; what was
handed out but never committed is not in the file, so it is handed out again.

A state file belongs to one running source: :meth:`Checkpoint.load` takes an exclusive
``flock`` on ``<state_path>.lock`` and fails start-up when another source — in the same
run or another process — holds it (B77). The kernel drops the lock when the process
dies, so a ``kill -9`` never leaves it behind.

Called from the pipeline thread only; does no network I/O.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter, deque
from pathlib import Path
from typing import NamedTuple

from spate import lock_exclusive
from spate.errors import ErrorClass, SourceError

from spate_http.config import Window

logger = logging.getLogger(__name__)

STATE_VERSION = 1


class _Pending(NamedTuple):
    offset: int
    key: str | None
    tick: int
    at: float


class Checkpoint:
    """Offsets, tick count and delivered keys of one source, persisted on commit."""

    def __init__(self, path: str, window: Window) -> None:
        self.path = Path(path) if path else None
        self.window = window
        self.next_offset = 0
        """The offset the next record handed out gets."""
        self.committed = 0
        """Everything before this offset is delivered."""
        self.tick = 0
        """Ticks taken so far (the number of the latest tick)."""
        self.seen: dict[str, tuple[int, float]] = {}
        """Delivered key → (tick, wall time) of its delivery."""
        self._pending: deque[_Pending] = deque()
        self._pending_keys: Counter[str] = Counter()
        self._lock_fd: int | None = None

    def load(self) -> None:
        """Lock the state file and read it, if there is one (``SourceError`` when it is
        held by another source or unreadable)."""
        if self.path is None:
            return
        self._lock()
        if not self.path.exists():
            return
        try:
            raw = json.loads(self.path.read_text())
            if raw.get("version") != STATE_VERSION:
                raise ValueError(f"unknown version {raw.get('version')!r}")
            self.next_offset = self.committed = int(raw["next_offset"])
            self.tick = int(raw["tick"])
            self.seen = {str(k): (int(v[0]), float(v[1])) for k, v in raw["seen"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            self.release()
            raise SourceError(
                f"cannot read the http_poll state file {self.path}: {exc}", ErrorClass.FATAL
            ) from exc
        logger.info(
            "resuming from %s: offset %d, tick %d, %d delivered key(s)",
            self.path,
            self.committed,
            self.tick,
            len(self.seen),
        )

    def _lock(self) -> None:
        assert self.path is not None
        lock_path = self.path.with_name(f"{self.path.name}.lock")
        try:
            fd = lock_exclusive(lock_path, create=True)
        except OSError as exc:
            raise SourceError(
                f"cannot open the http_poll state lock {lock_path}: {exc}", ErrorClass.FATAL
            ) from exc
        if fd is None:
            raise SourceError(
                f"the http_poll state file {self.path} is in use by another running source; "
                "give each source its own state_path",
                ErrorClass.FATAL,
            )
        self._lock_fd = fd

    def release(self) -> None:
        """Let another source take the state file (called at close)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def fresh(self, seen: tuple[int, float], tick: int, now: float) -> bool:
        """Whether a key delivered at ``seen`` still drops repeats at ``tick``/``now``."""
        if self.window.ticks is not None:
            return tick - seen[0] < self.window.ticks
        assert self.window.seconds is not None
        return now - seen[1] < self.window.seconds

    def is_duplicate(self, key: str, tick: int, now: float) -> bool:
        """Whether ``key`` is in flight or was delivered within the window."""
        if self._pending_keys[key]:
            return True
        seen = self.seen.get(key)
        return seen is not None and self.fresh(seen, tick, now)

    def handed_out(self, key: str | None, tick: int, now: float) -> int:
        """Give the next offset to a record (with ``key``) handed out at ``tick``."""
        offset = self.next_offset
        self.next_offset += 1
        self._pending.append(_Pending(offset, key, tick, now))
        if key is not None:
            self._pending_keys[key] += 1
        return offset

    def commit(self, upto: int, now: float) -> None:
        """Everything before ``upto`` is delivered: its keys become seen; then persist."""
        if upto <= self.committed:
            return
        while self._pending and self._pending[0].offset < upto:
            entry = self._pending.popleft()
            if entry.key is not None:
                self._pending_keys[entry.key] -= 1
                if not self._pending_keys[entry.key]:
                    del self._pending_keys[entry.key]
                self.seen[entry.key] = (entry.tick, entry.at)
        self.committed = upto
        self.seen = {k: v for k, v in self.seen.items() if self.fresh(v, self.tick, now)}
        self.save()

    def save(self) -> None:
        """Write the committed state atomically (temporary file, fsync, rename)."""
        if self.path is None:
            return
        body = json.dumps(
            {
                "version": STATE_VERSION,
                "next_offset": self.committed,
                "tick": self.tick,
                "seen": {k: list(v) for k, v in self.seen.items()},
            },
            separators=(",", ":"),
        )
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(temporary, "w") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(temporary, self.path)
        except OSError as exc:
            raise SourceError(
                f"cannot write the http_poll state file {self.path}: {exc}", ErrorClass.FATAL
            ) from exc
