"""xxHash64 (seed 0), bit-exact with ClickHouse's ``xxHash64`` function.

Pure Python, so the sink needs no extra dependency: the ``distributed`` router hashes one
key per row with it. ClickHouse hashes a string's bytes, and a number's little-endian
bytes at the width of its column type (``xxHash64(toUInt32(7))`` hashes 4 bytes); the
router feeds it exactly that (see :mod:`spate_clickhouse._router`).
"""

from __future__ import annotations

_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261
_M = 0xFFFFFFFFFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M
    acc = _rotl(acc, 31)
    return (acc * _P1) & _M


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _M


def xxhash64(data: bytes, seed: int = 0) -> int:
    """The 64-bit xxHash of ``data``."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        limit = n - 32
        frm = int.from_bytes
        while i <= limit:
            v1 = _round(v1, frm(data[i : i + 8], "little"))
            v2 = _round(v2, frm(data[i + 8 : i + 16], "little"))
            v3 = _round(v3, frm(data[i + 16 : i + 24], "little"))
            v4 = _round(v4, frm(data[i + 24 : i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        h = _merge(h, v1)
        h = _merge(h, v2)
        h = _merge(h, v3)
        h = _merge(h, v4)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        k = _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h ^ k, 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (int.from_bytes(data[i : i + 4], "little") * _P1 & _M), 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * _P5 & _M), 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h
