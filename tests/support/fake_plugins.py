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
import uuid
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


CONNECTOR_MODULE = """
import socket
from dataclasses import dataclass
from typing import ClassVar

from spate.errors import DeserError, ErrorPolicy, SourceError
from spate.testing import FileSink, memory_source


@dataclass(frozen=True, slots=True, kw_only=True)
class CountingConfig:
    partitions: int = 2
    records: int = 10


class CountingSourceFactory:
    config_model: ClassVar[type] = CountingConfig

    @staticmethod
    def build(config, context):
        data = {
            p: [f"{p}-{i}".encode() for i in range(config.records)]
            for p in range(config.partitions)
        }
        source, _handle = memory_source(data, stream="counting", batch_size=7)
        return source


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteConfig:
    endpoint: str


class _RemoteSource:
    def __init__(self, endpoint):
        self.endpoint = endpoint

    def start(self, events):
        host, _, port = self.endpoint.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
        except OSError as exc:
            raise SourceError(f"cannot reach broker {self.endpoint}: {exc.strerror}") from exc

    def poll(self, timeout):
        return []

    def commit(self, offsets, *, sync):
        raise AssertionError("nothing may be committed")

    def pause(self, lanes):
        pass

    def resume(self, lanes):
        pass

    def close(self):
        pass


class RemoteSourceFactory:
    config_model: ClassVar[type] = RemoteConfig

    @staticmethod
    def build(config, context):
        return _RemoteSource(config.endpoint)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextConfig:
    encoding: str = "utf-8"
    reject_suffix: str = ""
    on_error: str = "skip"


class _Text:
    many = False

    def __init__(self, encoding, reject_suffix, on_error):
        self.encoding = encoding
        self.reject_suffix = reject_suffix
        self.on_error = ErrorPolicy(on_error)

    def deserialize(self, payload):
        text = bytes(payload).decode(self.encoding)
        if self.reject_suffix and text.endswith(self.reject_suffix):
            raise DeserError(f"refusing {text!r}")
        return text


class TextFactory:
    config_model: ClassVar[type] = TextConfig

    @staticmethod
    def build(config, context):
        return _Text(config.encoding, config.reject_suffix, config.on_error)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinesConfig:
    path: str
    max_rows: int = 50


class LinesSinkFactory:
    config_model: ClassVar[type] = LinesConfig

    @staticmethod
    def build(config, context):
        return FileSink(
            config.path,
            context.component,
            max_rows=config.max_rows,
            budget=context.budget,
            clock=context.clock,
        )


def chains(ctx):
    return ctx.chain().map(str.upper).sink()


class Hello:
    help = "print a greeting"

    @staticmethod
    def configure(parser):
        parser.add_argument("--who", default="world")

    @staticmethod
    def run(args):
        print(f"hello {args.who}")
        return 3
"""
"""Source of a third-party connector module: ``counting`` (a bounded memory source),
``remote`` (a source whose ``start`` connects to ``endpoint`` and fails naming it),
``text`` (a UTF-8 deserializer refusing payloads that end in ``reject_suffix`` under its
``on_error`` policy), ``lines`` (the test kit's fsynced file sink), a
``chains(ctx)`` that upper-cases records, and a ``hello`` command."""


def install_connectors(root: Path, distribution: str = "acme-connectors") -> str:
    """Install :data:`CONNECTOR_MODULE` as ``distribution`` 0.3.0; return the module name.

    Entry points: sources ``counting`` and ``remote``, deserializer ``text``, sink
    ``lines``, command ``hello``. Put ``root`` on ``sys.path`` before loading them.
    """
    module = f"acme_conn_{uuid.uuid4().hex[:8]}"
    install_dist(
        root,
        distribution,
        "0.3.0",
        entry_points={
            "spate.sources": {
                "counting": f"{module}:CountingSourceFactory",
                "remote": f"{module}:RemoteSourceFactory",
            },
            "spate.deserializers": {"text": f"{module}:TextFactory"},
            "spate.sinks": {"lines": f"{module}:LinesSinkFactory"},
            "spate.commands": {"hello": f"{module}:Hello"},
        },
        modules={f"{module}.py": CONNECTOR_MODULE},
    )
    return module
