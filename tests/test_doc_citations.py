"""Code and docs cite only documents inside the repository.

The architecture and performance rules live in docs/concepts/architecture.md and
docs/development.md; a citation of a design document that is not in the repository
(its section numbers) would send a reader nowhere.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_OUTSIDE = re.compile("DES" + r"IGN §\d+")  # spelled apart so this file does not match


def test_no_file_cites_a_design_document_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    cited = []
    for name in tracked:
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".sh", ".toml", ".yml", ".yaml", ".tmpl"}:
            continue
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _OUTSIDE.search(line):
                cited.append(f"{name}:{number}")
    assert cited == []


def test_the_rules_the_code_cites_are_in_the_docs() -> None:
    architecture = (ROOT / "docs" / "concepts" / "architecture.md").read_text(encoding="utf-8")
    development = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    for heading in ("## Records are borrowed", "## Threads", "## Connectors", "## Room for later"):
        assert heading in architecture, heading
    for heading in ("## What tests must show", "## Performance rules"):
        assert heading in development, heading
