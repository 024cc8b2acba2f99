"""Every behaviour in ``docs/BEHAVIOURS.md`` is cited by at least one test (by its number,
``B23`` in a docstring or comment, ``test_b23_...`` in a name), so each promise has a test
that fails if it breaks, and a reader can find it by number."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFINED = re.compile(r"^- \*\*B(\d+)\*\*", re.MULTILINE)
CITED = re.compile(r"(?<![A-Za-z0-9])[Bb](\d{1,4})(?!\d)")


def _test_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if name.startswith("tests/") or "/tests/" in name or "/conformance/" in name
    ]


def test_every_behaviour_is_cited_by_a_test() -> None:
    defined = {int(n) for n in DEFINED.findall((ROOT / "docs" / "BEHAVIOURS.md").read_text())}
    assert defined, "no behaviour found in docs/BEHAVIOURS.md"
    cited: set[int] = set()
    for path in _test_files():
        cited.update(int(n) for n in CITED.findall(path.read_text(errors="replace")))
    uncited = sorted(defined - cited)
    assert not uncited, f"behaviours no test cites: {', '.join(f'B{n}' for n in uncited)}"
