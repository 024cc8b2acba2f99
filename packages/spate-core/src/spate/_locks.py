"""Exclusive locks that die with the process holding them (B77, B114).

:func:`lock_exclusive` takes a ``flock`` on a file or a directory without waiting. The
lock belongs to the open file description, so a second attempt fails whether it comes
from another process or from this one (two components configured with the same path),
and the kernel drops it when the process dies: a ``kill -9`` never leaves it behind.
Used by the ``http_poll`` state file (B77) and the spool's directory (B114).

Does not own: what the lock protects, or the error a caller raises when it is held.
"""

from __future__ import annotations

import fcntl
import os


def lock_exclusive(path: str | os.PathLike[str], *, create: bool = False) -> int | None:
    """Lock ``path`` exclusively; the descriptor holding the lock, or None while another
    holder has it (closing the descriptor releases it).

    ``create`` creates ``path`` as an empty file if it is missing (a lock file); without
    it ``path`` is opened read-only, as a directory is. Raises ``OSError`` when ``path``
    cannot be opened or locked for another reason. Never blocks.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT if create else os.O_RDONLY, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd
