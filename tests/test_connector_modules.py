"""Every distribution's top-level module states its public API: a ``__all__`` whose every
name exists, with ``__version__`` equal to the installed distribution's version."""

from __future__ import annotations

import ast
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


def _public_modules() -> list[Path]:
    """Every public module of a connector package: ``spate_<name>/<module>.py`` without
    a leading underscore (ADR 0016)."""
    return sorted(
        path for path in ROOT.glob("packages/*/src/spate_*/*.py") if not path.name.startswith("_")
    )


@pytest.mark.parametrize("path", _public_modules(), ids=lambda p: f"{p.parent.name}.{p.stem}")
def test_every_public_connector_module_states_its_names(path: Path) -> None:
    """B186: a public module of a connector (``config.py``, ``cli.py``, ``testing.py``) has
    an ``__all__`` naming objects it defines, and every public class it defines is in it."""
    tree = ast.parse(path.read_text())
    defined: set[str] = set()
    classes: set[str] = set()
    exported: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
            defined.add(node.name)
        elif isinstance(node, ast.FunctionDef):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    if target.id == "__all__":
                        exported = list(ast.literal_eval(node.value))  # type: ignore[arg-type]
                    defined.add(target.id)
    assert exported is not None, f"{path.name} of {path.parent.name} has no __all__"
    assert set(exported) <= defined, sorted(set(exported) - defined)
    missing = {name for name in classes if not name.startswith("_")} - set(exported)
    assert not missing, f"public classes left out of __all__: {sorted(missing)}"
