"""``matrix``: every row at full scale, the ``ci`` rows alone below it, each row's id and
marks the same at every scale (tests/support/matrix.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.matrix import matrix


def _rows(decorator: pytest.MarkDecorator) -> dict[str, tuple[tuple[Any, ...], list[str]]]:
    """Each row's id: its values and the names of its marks."""
    _, params = decorator.args
    return {p.id: (tuple(p.values), [m.name for m in p.marks]) for p in params}


def test_below_full_scale_only_the_ci_rows_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPATE_TEST_SCALE", "0.1")
    rows = _rows(matrix("rebalance", ["eager", "cooperative", "consumer"], ci="consumer"))
    assert rows == {
        "eager": (("eager",), ["skip"]),
        "cooperative": (("cooperative",), ["skip"]),
        "consumer": (("consumer",), []),
    }


def test_at_full_scale_every_row_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPATE_TEST_SCALE", "1")
    rows = _rows(matrix("rebalance", ["eager", "consumer"], ci="consumer"))
    assert rows == {"eager": (("eager",), []), "consumer": (("consumer",), [])}


@pytest.mark.parametrize("scale", ["0.1", "1"])
def test_tuple_rows_are_named_by_their_joined_values_and_keep_their_marks(
    monkeypatch: pytest.MonkeyPatch, scale: str
) -> None:
    monkeypatch.setenv("SPATE_TEST_SCALE", scale)
    needs = pytest.mark.skipif(False, reason="installed")
    decorator = matrix(
        "path, policy",
        [("rows", "skip"), ("columns", "skip"), ("rows", "dead_letter")],
        ci=("rows-skip", "columns-skip"),
        marks={"columns-skip": needs},
    )
    assert decorator.args[0] == "path, policy"
    skipped = ["skip"] if scale == "0.1" else []
    assert _rows(decorator) == {
        "rows-skip": (("rows", "skip"), []),
        "columns-skip": (("columns", "skip"), ["skipif"]),
        "rows-dead_letter": (("rows", "dead_letter"), skipped),
    }


def test_a_row_named_in_ci_or_marks_must_exist() -> None:
    with pytest.raises(ValueError, match="rows-dead_letter"):
        matrix("path, policy", [("rows", "skip")], ci="rows-dead_letter")
    with pytest.raises(ValueError, match="columnar"):
        matrix("path", ["row"], ci="row", marks={"columnar": pytest.mark.skip})
