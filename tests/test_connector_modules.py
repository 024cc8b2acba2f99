"""Every distribution's top-level module states its public API: a ``__all__`` whose every
name exists, with ``__version__`` equal to the installed distribution's version."""

from __future__ import annotations

import importlib
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from tests.support.avro_native import AVRO_COLUMNAR, SKIP_REASON

ROOT = Path(__file__).resolve().parents[1]


def _distributions() -> list[tuple[str, str]]:
    """``(distribution, top-level module)`` of every package in the repository."""
    found = []
    for project in sorted(ROOT.glob("packages/*/pyproject.toml")):
        name = tomllib.loads(project.read_text())["project"]["name"]
        modules = [
            p.name for p in (project.parent / "src").iterdir() if (p / "__init__.py").exists()
        ]
        assert len(modules) == 1, (name, modules)
        found.append((name, modules[0]))
    return found


@pytest.mark.parametrize(("distribution", "module"), _distributions())
def test_every_distribution_exports_its_names_and_version(distribution: str, module: str) -> None:
    if distribution == "spate-avro-native" and not AVRO_COLUMNAR:
        pytest.skip(SKIP_REASON)  # the one distribution a machine without cargo lacks
    loaded = importlib.import_module(module)
    exported = loaded.__all__
    assert "__version__" in exported, f"{module}.__all__ lacks __version__"
    assert loaded.__version__ == metadata.version(distribution)
    missing = [name for name in exported if not hasattr(loaded, name)]
    assert not missing, f"{module}.__all__ names what it lacks: {missing}"


def _entry_points() -> list[tuple[str, str, str]]:
    """``(pyproject, group.name, object reference)`` of every entry point declared."""
    found = []
    for project in sorted([ROOT / "pyproject.toml", *ROOT.glob("packages/*/pyproject.toml")]):
        groups = tomllib.loads(project.read_text()).get("project", {}).get("entry-points", {})
        for group, entries in groups.items():
            for name, reference in entries.items():
                found.append((str(project.relative_to(ROOT)), f"{group}.{name}", reference))
    return found


@pytest.mark.parametrize(("project", "entry", "reference"), _entry_points())
def test_every_entry_point_names_a_public_object(project: str, entry: str, reference: str) -> None:
    """An entry point is an interface a user's configuration reaches (a YAML tag, a ``spate``
    subcommand): it names a public module and a name that module exports (B186)."""
    module, _, attribute = reference.partition(":")
    private = [part for part in (*module.split("."), *attribute.split(".")) if part.startswith("_")]
    assert not private, f"{project}: {entry} = {reference!r} names private {private}"
    try:
        loaded = importlib.import_module(module)
    except ImportError:
        pytest.skip(f"{module} is not installed here")
    exported = getattr(loaded, "__all__", None)
    head = attribute.split(".")[0]
    assert exported is not None and head in exported, (
        f"{project}: {entry} = {reference!r}: {head} is not in {module}.__all__"
    )
