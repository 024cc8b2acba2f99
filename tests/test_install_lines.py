"""Every install line in the README and the docs works today (B136).

spate is not on the public package index, and the name ``spate`` there is another
project's (ADR 0003): an install line may name a spate distribution only as a folder of a
checkout (or from wheels built here, with ``--find-links``), and a checkout install names
every sibling folder the installed distributions depend on, since pip cannot fetch them.
``docs/install.md`` is the one place that maps each front-door extra to its install; its
table is kept equal to the front door's ``pyproject.toml``.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_REQUIREMENT = re.compile(r"(spate-[a-z0-9-]+)(?:\[([a-z0-9,-]+)\])?")
_FENCE = re.compile(r"^(```|~~~)")


def _documents() -> list[Path]:
    """README, docs (not the decision records and promises, which quote old lines),
    the distributions' and examples' READMEs, the docker README."""
    docs = [
        p
        for p in (ROOT / "docs").rglob("*.md")
        if "adr" not in p.relative_to(ROOT / "docs").parts and p.name != "BEHAVIOURS.md"
    ]
    others = [ROOT / "README.md", ROOT / "docker" / "README.md"]
    others += sorted((ROOT / "packages").glob("*/README.md"))
    others += sorted((ROOT / "examples").rglob("README.md"))
    return sorted(docs) + [p for p in others if p.is_file()]


def install_commands(text: str) -> list[str]:
    """The ``pip install`` commands of a markdown text: whole lines of fenced blocks
    (continuations joined, comments dropped; not ``text`` blocks, which show output) and
    inline code spans."""
    commands: list[str] = []
    prose: list[str] = []
    in_block = output = False
    for line in text.replace("\\\n", " ").splitlines():
        if _FENCE.match(line.strip()):
            in_block = not in_block
            # A program's output (an error's hint quoted in a text block) is no instruction.
            output = in_block and line.strip()[3:] in ("text", "console")
            continue
        if in_block and not output:
            command = line.split(" #", 1)[0]
            at = command.find("pip install")
            if at >= 0:
                commands.append(command[at:])
        else:
            prose.append(line)
    for span in re.findall(r"`([^`]+)`", "\n".join(prose)):
        at = span.find("pip install")
        if at >= 0:
            commands.append(" ".join(span[at:].split()))
    return commands


def _dependencies(folder: str, extras: set[str]) -> set[tuple[str, str | None]]:
    """The spate distributions a checkout folder needs, with the extras it asks of them."""
    project = tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())
    requirements = list(project["project"].get("dependencies", []))
    for extra in extras:
        requirements += project["project"].get("optional-dependencies", {}).get(extra, [])
    found = (_REQUIREMENT.match(r) for r in requirements)
    return {(m.group(1), m.group(2)) for m in found if m}


def problems(command: str) -> list[str]:
    """What is wrong with one install command; empty when it works from a checkout."""
    words = shlex.split(command)[2:]
    from_wheels = any(w.startswith("--find-links") for w in words)
    installed: dict[str, set[str]] = {}
    found: list[str] = []
    skip = False
    for word in words:
        if skip or word.startswith("-") or word.startswith("<") or word.startswith("$"):
            skip = word in ("-r", "--requirement", "-c", "--find-links", "-f")
            continue
        name, _, extras = word.partition("[")
        wanted = set(filter(None, extras.rstrip("]").split(",")))
        if "/" in name or name.startswith("."):
            parts = Path(name).parts
            # Folders of this repository (not a glob or an ellipsis in prose).
            if len(parts) >= 2 and parts[-2] == "packages" and (ROOT / name).is_dir():
                installed.setdefault(parts[-1], set()).update(wanted)
        elif re.match(r"spate\b", name) and not from_wheels:
            found.append(f"{word!r} is fetched from the package index, where spate is not")
    todo = [(folder, extras) for folder, extras in installed.items()]
    while todo:
        folder, extras = todo.pop()
        for needed, extra in _dependencies(folder, extras):
            if needed not in installed:
                found.append(f"needs ./packages/{needed} too (a dependency of {folder})")
                installed[needed] = set()
            if extra and extra not in installed[needed]:
                found.append(f"needs ./packages/{needed}[{extra}] (for {folder})")
                installed[needed].add(extra)
            todo.append((needed, {extra} if extra else set()))
    return found


def test_b136_every_install_line_works_from_a_checkout() -> None:
    seen = 0
    wrong: list[str] = []
    for path in _documents():
        for command in install_commands(path.read_text()):
            seen += 1
            wrong += [f"{path.relative_to(ROOT)}: {command}: {p}" for p in problems(command)]
    assert seen >= 30, "the docs' install lines were not found"
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ('pip install "spate[kafka,clickhouse]"', "fetched from the package index"),
        ("pip install spate-kafka", "fetched from the package index"),
        ("pip install ./packages/spate-kafka", "needs ./packages/spate-core"),
        ('pip install ./packages/spate-core "./packages/spate-avro[columnar]"', "avro-native"),
    ],
)
def test_b136_the_check_refuses_what_does_not_work(command: str, expected: str) -> None:
    assert any(expected in p for p in problems(command))


def test_b136_the_front_door_with_find_links_and_third_party_packages_pass() -> None:
    assert problems('pip install --find-links dist "spate[kafka,clickhouse]==0.1.0"') == []
    assert problems("pip install rich") == []
    assert problems("pip install ./packages/spate-core ./packages/spate-kafka") == []


def test_b136_the_install_page_lists_every_extra_of_the_front_door() -> None:
    """One row per extra, whose install brings what the extra pulls in."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"^\| `([a-z0-9-]+)` \| .* \| `(pip install [^`]+)` \|$",
            (ROOT / "docs" / "install.md").read_text(),
            flags=re.M,
        )
    }
    assert set(rows) == set(extras)
    for extra, requirements in extras.items():
        words = shlex.split(rows[extra])[2:]
        listed = {Path(w.partition("[")[0]).name: w for w in words}
        for requirement in requirements:
            match = _REQUIREMENT.match(requirement)
            assert match is not None
            name, wanted = match.group(1), match.group(2)
            assert name in listed, f"{extra}: {rows[extra]} lacks {name}"
            if wanted:
                assert f"[{wanted}]" in listed[name], f"{extra}: {name} without [{wanted}]"
        assert problems(rows[extra]) == []
