"""Durations (``100ms 5s 2m 1h``) and sizes (``64KiB 128MiB 1GiB``, ``1MB``).

Durations become float seconds. Sizes become int bytes: binary suffixes (KiB, MiB,
GiB, TiB) are powers of 1024, decimal ones (KB, MB, GB, TB) powers of 1000, and a bare
integer is a byte count.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_DURATION_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$")
_SIZE_SCALE = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}


def parse_duration(value: object) -> float:
    """Seconds from ``'250ms'``, ``'5s'``, ``'2m'``, ``'1h'``, ``'1d'``.

    A bare number is refused: a duration must say its unit. Raises ``ValueError``.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"expected a duration with a unit such as 500ms, 5s, 2m, got {value!r}")
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(f"expected a duration with a unit such as 500ms, 5s, 2m, got {value!r}")
    return float(match.group(1)) * _DURATION_SCALE[match.group(2)]


def parse_size(value: object) -> int:
    """Bytes from ``'64KiB'``, ``'1MB'``, ``'1GiB'`` or a bare integer. Raises ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 64KiB or 1MB, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a size such as 64KiB or 1MB, got {value!r}")
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"expected a size such as 64KiB or 1MB, got {value!r}")
    number, unit = match.group(1), match.group(2) or "B"
    result = float(number) * _SIZE_SCALE[unit]
    if result != int(result):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(result)


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of ``seconds`` for docs (``0.1`` → ``100ms``)."""
    for unit in ("d", "h", "m", "s"):
        scale = _DURATION_SCALE[unit]
        if seconds >= scale and (seconds / scale).is_integer():
            return f"{int(seconds / scale)}{unit}"
    millis = seconds * 1000
    if millis.is_integer():
        return f"{int(millis)}ms"
    return f"{seconds}s"


def format_size(size: int) -> str:
    """The shortest exact spelling of ``size`` for docs: binary units first
    (``1048576`` → ``1MiB``), then decimal ones (``1000000`` → ``1MB``), else bytes."""
    for unit in ("TiB", "GiB", "MiB", "KiB", "TB", "GB", "MB", "KB"):
        scale = _SIZE_SCALE[unit]
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)
