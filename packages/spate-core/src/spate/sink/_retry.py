"""Capped exponential backoff whose jitter only shortens a wait (B12).

After the n-th failed attempt of a batch the next attempt waits
``min(max, initial * multiplier ** (n - 1)) * (1 - jitter * u)`` with ``u`` uniform in
``[0, 1)``: never longer than the capped exponential value, so ``retry.max`` is a real
bound. ``max_attempts`` counts attempts including the first; 0 means no limit (the
drain deadline ends the retries).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from spate.sink.config import RetryConfig


class Backoff:
    """Delays between the attempts of one batch."""

    __slots__ = ("_cap_exponent", "_config", "_rng")

    def __init__(self, config: RetryConfig, rng: Callable[[], float] = random.random) -> None:
        self._config = config
        self._rng = rng
        if config.multiplier > 1.0:
            ratio = config.max / config.initial
            self._cap_exponent = max(0, math.ceil(math.log(ratio, config.multiplier)) + 1)
        else:
            self._cap_exponent = 0

    def ceiling(self, failures: int) -> float:
        """The un-jittered wait after ``failures`` failed attempts (``failures >= 1``)."""
        c = self._config
        exponent = min(max(failures - 1, 0), self._cap_exponent)
        return min(c.max, c.initial * c.multiplier**exponent)

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failed attempts, jittered downwards."""
        return self.ceiling(failures) * (1.0 - self._config.jitter * self._rng())

    def exhausted(self, attempts: int) -> bool:
        """Whether a batch that has made ``attempts`` attempts may not try again."""
        limit = self._config.max_attempts
        return limit > 0 and attempts >= limit
