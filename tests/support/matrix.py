"""Test matrices that run whole at full scale and sampled at the CI scale.

Some real-broker tests repeat one scenario under each value of an axis whose values share
most of their code (the group protocols: eager, cooperative, consumer; the row path and
the columnar one; a dead-letter policy). Each such run waits on real sessions, rebalances,
kills and outages, so the matrix costs minutes while its rows differ in a small part.
``make test-full`` (``SPATE_TEST_SCALE=1``) runs every row; below full scale a test runs
only the rows it names ``ci`` and reports the others as skipped, naming the command that
runs them. A file (or a family of files, such as the flagship's fault tests) picks its
``ci`` rows so that every value of each axis still runs on every commit, in one test or
another.

A row is one value, or a tuple of values when the matrix spans several arguments
(``"path, policy"``); ``ci`` and ``marks`` name a row by its test id, the tuple's values
joined with ``-`` as pytest joins them (``"rows-skip"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tests.support.scale import current_scale

Row = str | tuple[str, ...]
"""One row: the value of a single argument, or the values of several."""


def row_id(row: Row) -> str:
    """The row's test id: the value itself, or the values joined with ``-``."""
    return row if isinstance(row, str) else "-".join(row)


def matrix(
    name: str,
    values: Sequence[Row],
    *,
    ci: str | Sequence[str],
    marks: Mapping[str, pytest.MarkDecorator] | None = None,
) -> pytest.MarkDecorator:
    """``pytest.mark.parametrize(name, values)``, with the rows not in ``ci`` skipped
    below full scale; ``marks`` adds a mark to the rows it names (such as
    ``needs_avro_columnar``), at every scale."""
    ids = [row_id(value) for value in values]
    kept = {ci} if isinstance(ci, str) else set(ci)
    extra = dict(marks or {})
    unknown = (kept | extra.keys()).difference(ids)
    if unknown:
        raise ValueError(f"rows {sorted(unknown)} are not among {ids}")
    full = current_scale() >= 1
    reason = f"{name}={{}} runs in make test-full (SPATE_TEST_SCALE=1)"
    params = []
    for value, ident in zip(values, ids, strict=True):
        row_marks = [extra[ident]] if ident in extra else []
        if not (full or ident in kept):
            row_marks.append(pytest.mark.skip(reason=reason.format(ident)))
        args = (value,) if isinstance(value, str) else value
        params.append(pytest.param(*args, marks=row_marks, id=ident))
    return pytest.mark.parametrize(name, params)
