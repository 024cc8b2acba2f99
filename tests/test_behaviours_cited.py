"""Every behaviour in ``docs/BEHAVIOURS.md`` is cited by at least one test, so each promise
has a test that fails if it breaks, and a reader can find it by number.

A citation is the number as a word: ``B23`` in a docstring, comment or string of a test
file (``B54-B57`` cites B54 and B57), or a ``b23`` part of a test's name
(``test_b23_...``, ``test_b17_b45_...``). Look-alikes are not citations: a bytes literal
(``b"k1"``), a hex digit run (``0xB1``), a variable ``b1`` or an identifier ``B12x``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFINED = re.compile(r"^- \*\*B(\d+)\*\*", re.MULTILINE)
WORD = re.compile(r"(?<![A-Za-z0-9_])B(\d+)(?![A-Za-z0-9_])")
TEST_NAME = re.compile(r"\b(?:def|class) ([Tt]est\w*)")
NAME_PART = re.compile(r"(?<=_)b(\d+)(?=_|$)")


def cited(text: str) -> set[int]:
    """The behaviour numbers ``text`` (a test file) cites."""
    numbers = {int(n) for n in WORD.findall(text)}
    for name in TEST_NAME.findall(text):
        numbers.update(int(n) for n in NAME_PART.findall(name))
    return numbers


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
    found: set[int] = set()
    for path in _test_files():
        found |= cited(path.read_text(errors="replace"))
    uncited = sorted(defined - found)
    assert not uncited, f"behaviours no test cites: {', '.join(f'B{n}' for n in uncited)}"


def test_only_a_number_as_a_word_or_a_test_name_part_is_a_citation() -> None:
    text = '''
    def test_b17_b45_unknown_key(k=b"k1", mask=0xB1, b2=3, B12x=4) -> None:
        """Spool replays (B54-B57, B101); see also _B9."""
    def helper_b3_not_a_test(): ...
    class TestB8Things: ...
    '''
    assert cited(text) == {17, 45, 54, 57, 101}
