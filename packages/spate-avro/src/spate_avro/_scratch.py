"""Scratch files of the columnar Avro decoder, and the leftovers of a process that died.

jetliner reads only from a path, so each batch is written to a scratch file before it is
read. jetliner 0.2 reserves memory for the item count an array or map block declares; a
corrupt datum declaring billions of items makes the allocation fail and the process
aborts, with no Python exception to catch. The scratch file is what survives (B98):

* each file is named ``spate-avro-<pid>-<token>.avro`` and is held under an exclusive
  ``flock`` by its owner from before it gets that name; the kernel releases the lock when
  the owner dies, however it dies, so a lock that can be taken marks a dead owner (a
  reused pid cannot fool it);
* next to it, ``spate-avro-<pid>-<token>.ends`` holds the batch's datum boundaries (the
  offsets of the framed datums), so the datums of a leftover are split exactly;
* the batch file is emptied after each read: a dead owner's non-empty file is the batch
  the reader was reading when the process died.

A new decoder adopts the non-empty leftovers of dead owners whose container header is
one of its own (the same writer schema) and deletes them with their ``.ends`` files;
empty leftovers of dead owners are deleted too. A dead owner's leftover of another
schema is left for a decoder of that schema (a restarted process builds it on the first
batch it reads again) and deleted once it is older than :data:`STALE_SECONDS`.

The directory is ``$SPATE_AVRO_SCRATCH_DIR`` when set, else ``/dev/shm`` when writable,
else the system temporary directory. Recovery needs the directory to outlive the process:
in a container, mount a volume there (or point the variable at one).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import itertools
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

logger = logging.getLogger(__name__)

SCRATCH_ENV = "SPATE_AVRO_SCRATCH_DIR"
"""The environment variable naming the scratch directory."""
STALE_SECONDS = 3600.0
"""A dead owner's leftover of a schema no decoder here adopts is deleted after this long."""
_PREFIX = "spate-avro-"
_SUFFIX = ".avro"
_ENDS = ".ends"
_NEW = f".{_PREFIX}new-"
_OWNED = re.compile(rf"{_PREFIX}[0-9]+-[a-z0-9_]+\{_SUFFIX}")
"""The name of a batch file (pid, then mkstemp's token): nothing else is adopted or deleted."""


def scratch_dir() -> str:
    """Where scratch files go (see the module docstring)."""
    configured = os.environ.get(SCRATCH_ENV)
    if configured:
        os.makedirs(configured, exist_ok=True)
        return configured
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


class ScratchFile:
    """One locked batch file and its ``.ends`` file, owned by this process."""

    def __init__(self, directory: str) -> None:
        fd, temporary = tempfile.mkstemp(prefix=_NEW, suffix=_SUFFIX, dir=directory)
        token = os.path.basename(temporary)[len(_NEW) :]
        stem = os.path.join(directory, f"{_PREFIX}{os.getpid()}-{token}")
        self.ends_path = stem[: -len(_SUFFIX)] + _ENDS
        self.ends_fd = -1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # before it gets a name scans see
            self.ends_fd = os.open(self.ends_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.rename(temporary, stem)
        except BaseException:
            if self.ends_fd >= 0:
                _discard(self.ends_fd, self.ends_path)
            _discard(fd, temporary)
            raise
        self.path = stem
        self.fd = fd

    def close(self) -> None:
        _discard(self.ends_fd, self.ends_path)
        _discard(self.fd, self.path)


def _discard(fd: int, path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.close(fd)


def write_at_start(fd: int, data: bytes | memoryview) -> None:
    """Write ``data`` at the start of the file ``fd``."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], done)


@dataclass(frozen=True)
class Leftover:
    """A dead owner's batch: its container bytes and its datum boundaries."""

    content: bytes
    ends: bytes


@contextlib.contextmanager
def dead_leftovers(directory: str) -> Iterator[list[tuple[Leftover, list[bool]]]]:
    """The non-empty batch files of dead owners in ``directory``, each locked while the
    caller looks at it, with a flag list: set ``flags[0]`` to adopt it (it is deleted)."""
    found: list[tuple[str, int, Leftover, list[bool]]] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        names = []
    try:
        for name in names:
            if not _OWNED.fullmatch(name):
                continue
            path = os.path.join(directory, name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a live owner holds it
                os.close(fd)
                continue
            leftover = _read(fd, path)
            if leftover is None:  # empty: the owner died between batches
                _remove(fd, path)
                continue
            found.append((path, fd, leftover, [False]))
        yield [(leftover, flags) for _, _, leftover, flags in found]
    finally:
        now = time.time()
        for path, fd, _, flags in found:
            stale = _age(fd, now) > STALE_SECONDS
            if flags[0] or stale:
                if not flags[0]:
                    logger.warning("deleting a stale columnar Avro scratch file %s", path)
                _remove(fd, path)
            else:
                os.close(fd)


def _read(fd: int, path: str) -> Leftover | None:
    with open(fd, "rb", closefd=False) as file:
        content = file.read()
    if not content:
        return None
    try:
        with open(path[: -len(_SUFFIX)] + _ENDS, "rb") as file:
            ends = file.read()
    except OSError:
        ends = b""
    return Leftover(content, ends)


def _age(fd: int, now: float) -> float:
    try:
        return now - os.fstat(fd).st_mtime
    except OSError:
        return 0.0


def _remove(fd: int, path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path[: -len(_SUFFIX)] + _ENDS)
    _discard(fd, path)


def split(body: bytes, ends: bytes, count: int, sentinel: bytes) -> list[bytes] | None:
    """The ``count`` datums of a block ``body`` whose framed datums (each followed by
    ``sentinel``) end at the offsets in ``ends`` (``count + 1`` int64, the first one where
    the block starts); None when they do not fit the body."""
    offsets = array.array("q")
    if len(ends) < 8 * (count + 1):
        return None
    offsets.frombytes(ends[: 8 * (count + 1)])
    first = offsets[0]
    if offsets[count] - first != len(body):
        return None
    datums = []
    for start, stop in itertools.pairwise(offsets):
        if stop - len(sentinel) < start:
            return None
        datums.append(body[start - first : stop - first - len(sentinel)])
    return datums
