"""Install throwaway distributions into a directory, as pip would lay them out.

Tests of the plugin registry and the CLI need distributions that declare entry points
(a third-party connector, a broken plugin, the front door with its extras) without
touching the shared environment. :func:`install_dist` writes a real ``.dist-info``
folder (``METADATA``, ``entry_points.txt``) and optional modules into a directory; point
``Registry(path=[dir])`` at it, and put the directory on ``sys.path`` (or
``PYTHONPATH`` for a subprocess) so the modules import.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path


def install_dist(
    root: Path,
    name: str,
    version: str = "1.0.0",
    *,
    entry_points: Mapping[str, Mapping[str, str]] | None = None,
    requires: Sequence[str] = (),
    extras: Sequence[str] = (),
    modules: Mapping[str, str] | None = None,
) -> Path:
    """Write distribution ``name`` into ``root``; return its ``.dist-info`` folder.

    ``entry_points`` maps group → {entry name → ``module:attr``}; ``requires`` are
    ``Requires-Dist`` lines; ``modules`` maps a module file name (``foo.py``) to source.
    """
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Provides-Extra: {extra}" for extra in extras]
    lines += [f"Requires-Dist: {req}" for req in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if entry_points:
        text = []
        for group, entries in entry_points.items():
            text.append(f"[{group}]")
            text += [f"{entry} = {target}" for entry, target in entries.items()]
            text.append("")
        (info / "entry_points.txt").write_text("\n".join(text), encoding="utf-8")
    for filename, source in (modules or {}).items():
        (root / filename).write_text(source, encoding="utf-8")
    return info


REPO_ROOT = Path(__file__).resolve().parents[2]


def front_door_extras() -> dict[str, list[str]]:
    """The front door's extras as the repository's root ``pyproject.toml`` declares them."""
    with (REPO_ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return extras


def install_front_door(root: Path, version: str = "0.1.0") -> Path:
    """Write the front door ``spate`` with the repository's connector extras into ``root``."""
    extras = front_door_extras()
    requires = ["spate-core==0.1.0"]
    for extra, reqs in extras.items():
        requires += [f'{req}; extra == "{extra}"' for req in reqs]
    return install_dist(root, "spate", version, requires=requires, extras=list(extras))
