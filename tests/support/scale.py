"""Test volumes scale with one environment variable, ``SPATE_TEST_SCALE``.

``make test`` (and CI) runs with a small scale so the suite stays within ~20 minutes on
two cores; ``make test-full`` sets ``SPATE_TEST_SCALE=1`` and runs the volumes the
issues name. Tests ask for ``scaled(N)`` instead of writing a bare ``N``.
"""

from __future__ import annotations

import os

import pytest


def current_scale() -> float:
    """The scale factor in force (1.0 = full volumes)."""
    raw = os.environ.get("SPATE_TEST_SCALE", "1")
    try:
        value = float(raw)
    except ValueError as exc:
        raise RuntimeError(f"SPATE_TEST_SCALE must be a number, got {raw!r}") from exc
    if value <= 0:
        raise RuntimeError(f"SPATE_TEST_SCALE must be > 0, got {raw!r}")
    return value


def scaled(full: int, minimum: int = 1) -> int:
    """``full`` scaled by ``SPATE_TEST_SCALE``, never below ``minimum``."""
    return max(minimum, int(full * current_scale()))


@pytest.fixture(scope="session")
def scale() -> float:
    return current_scale()
