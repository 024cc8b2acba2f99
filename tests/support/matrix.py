"""Test matrices that run whole at full scale and sampled at the CI scale.

Some real-broker tests repeat one scenario under each value of an axis whose values share
most of their code (the group protocols: eager, cooperative, consumer). Each such run
waits on real sessions and rebalances, so the matrix costs minutes while its rows differ
in a small part. ``make test-full`` (``SPATE_TEST_SCALE=1``) runs every row; below full
scale a test runs only the rows it names ``ci`` and reports the others as skipped, naming
the command that runs them. A file picks its ``ci`` rows so that every value of the axis
still runs on every commit, in one test of the file or another.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.support.scale import current_scale


def matrix(name: str, values: Sequence[str], *, ci: str | Sequence[str]) -> pytest.MarkDecorator:
    """``pytest.mark.parametrize(name, values)``, with the rows not in ``ci`` skipped
    below full scale."""
    kept = {ci} if isinstance(ci, str) else set(ci)
    unknown = kept.difference(values)
    if unknown:
        raise ValueError(f"ci rows {sorted(unknown)} are not among {list(values)}")
    full = current_scale() >= 1
    reason = f"{name}={{}} runs in make test-full (SPATE_TEST_SCALE=1)"
    params = [
        pytest.param(
            value,
            marks=() if full or value in kept else pytest.mark.skip(reason=reason.format(value)),
        )
        for value in values
    ]
    return pytest.mark.parametrize(name, params)
