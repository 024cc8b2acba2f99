"""``spate new-connector NAME``: copy the connector template into a new distribution.

Owns the name rules and the rendering; the template itself is package data under
``spate/cli/_template/<kind>/`` (files ending in ``.tmpl``, a ``__module__`` directory
standing for the import package). Placeholders use :class:`string.Template` syntax:
``${dist}`` (``spate-foo``), ``${module}`` (``spate_foo``), ``${tag}`` (``foo``, the
YAML tag and entry-point name), ``${Name}`` (``Foo``, the class-name prefix),
``${core_version}`` and ``${core_next}`` (the spate-core range to depend on).

The generated package is a working connector whose tests run spate's conformance suite,
so a connector author starts from green tests (B27). Nothing existing is overwritten.
"""

from __future__ import annotations

import re
import string
from collections.abc import Collection
from dataclasses import dataclass
from importlib import metadata, resources
from importlib.resources.abc import Traversable
from pathlib import Path

from spate import __version__
from spate.plugins._entry_points import FRONT_DOOR_EXTRAS

KINDS = ("sink", "source", "deserializer")
"""Templates shipped with spate-core: a JSON-lines file sink deduplicating by token, a
bounded text-file source keeping its commits in an offsets file, a delimited-line
deserializer."""

_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
_MODULE_DIR = "__module__"
_SUFFIX = ".tmpl"


class ScaffoldError(ValueError):
    """The name or target directory cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class ConnectorNames:
    """Every spelling of a new connector's name."""

    tag: str
    dist: str
    module: str
    name: str

    @classmethod
    def parse(cls, raw: str) -> ConnectorNames:
        """``"parquet"``, ``"spate-parquet"`` or ``"object-store"`` → all spellings."""
        text = raw.strip().lower()
        text = text.removeprefix("spate-").removeprefix("spate_")
        if not _NAME.match(text):
            raise ScaffoldError(
                f"connector name {raw!r}: use lowercase letters, digits and single '-' or '_' "
                "between words, starting with a letter (e.g. parquet, object-store)"
            )
        words = re.split(r"[-_]", text)
        tag = "_".join(words)
        return cls(
            tag=tag,
            dist="spate-" + "-".join(words),
            module="spate_" + tag,
            name="".join(word.capitalize() for word in words),
        )


def _template_root(kind: str) -> Traversable:
    if kind not in KINDS:
        raise ScaffoldError(f"no template for {kind!r}; choose one of {', '.join(KINDS)}")
    return resources.files("spate.cli").joinpath("_template", kind)


def _walk(node: Traversable, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """Every template file under ``node`` as (relative path parts, text), sorted."""
    found: list[tuple[tuple[str, ...], str]] = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.is_dir():
            found.extend(_walk(child, (*prefix, child.name)))
        elif child.name.endswith(_SUFFIX):
            found.append(((*prefix, child.name), child.read_text(encoding="utf-8")))
    return found


def taken_names(names: ConnectorNames, installed_tags: Collection[str] = ()) -> str | None:
    """Why ``names`` would shadow something that exists, or None when they are free.

    Refused: spate's own distributions (``spate-kafka`` …, installed or not), any
    installed distribution of that name, and a connector tag already installed.
    """
    spate_dists = {"spate-core", *(d for ds in FRONT_DOOR_EXTRAS.values() for d in ds)}
    if names.dist in spate_dists:
        return f"{names.dist} is one of spate's own distributions"
    try:
        metadata.distribution(names.dist)
    except metadata.PackageNotFoundError:
        pass
    else:
        return f"a distribution named {names.dist} is installed"
    if names.tag in installed_tags:
        return f"a connector named {names.tag!r} is installed"
    return None


def new_connector(
    raw_name: str, directory: Path, kind: str = "sink", *, installed_tags: Collection[str] = ()
) -> tuple[Path, list[Path]]:
    """Render the ``kind`` template for ``raw_name`` into ``directory/<dist>``.

    Returns the package root and the files written. Raises :class:`ScaffoldError` for a
    bad name or kind, a name that would shadow an existing distribution or installed
    connector (``installed_tags``, of this kind), or when the target exists already
    (nothing is overwritten).
    """
    names = ConnectorNames.parse(raw_name)
    template = _template_root(kind)
    taken = taken_names(names, installed_tags)
    if taken is not None:
        raise ScaffoldError(
            f"connector name {raw_name!r}: {taken}, so the new package would shadow it; "
            "choose another name"
        )
    root = directory / names.dist
    if root.exists():
        raise ScaffoldError(f"{root} already exists; choose another name or --directory")
    major, minor = [*__version__.split("."), "0", "0"][:2]
    values = {
        "dist": names.dist,
        "module": names.module,
        "tag": names.tag,
        "Name": names.name,
        "core_version": __version__,
        "core_next": f"{major}.{int(minor) + 1}",
    }
    written: list[Path] = []
    for parts, text in _walk(template):
        rel = [names.module if part == _MODULE_DIR else part for part in parts]
        rel[-1] = rel[-1].removesuffix(_SUFFIX)
        target = root.joinpath(*rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(string.Template(text).substitute(values), encoding="utf-8")
        written.append(target)
    return root, written
