"""The plugin registry: installed connectors and commands, found by entry point (B26, B27).

Entry points in the groups of :class:`~spate.plugins.PluginKind` (``spate.sources``,
``spate.sinks``, ``spate.deserializers``, ``spate.coordination_stores``) and
``spate.commands`` are scanned once, lazily, on first use; a plugin's module is imported
only when the plugin is asked for by name, and the loaded object is cached. A loaded
connector must be a factory exposing its ``config_model`` dataclass and a ``build``
method; anything else is a :class:`~spate.errors.PluginError` naming the entry point.

A name nobody declares raises :class:`~spate.errors.MissingConnectorError`. When one of
spate's distributions provides it, the error says which one and how to install it,
derived from the front door's extras (the installed front door's metadata, else the
table :data:`~spate.plugins._entry_points.FRONT_DOOR_EXTRAS`): the extra named like the
connector, else an extra pulling in ``spate-<name>``, else an extra whose dashed name
contains the connector's name. Any other name gets no install command — a guessed
package name could belong to anybody — but the close matches among installed and known
connector names ("did you mean 'kafka'?") and the installed names of that kind.

Registries are plain objects (no module-level instance): tests build their own over a
search path of their choosing.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spate.errors import MissingConnectorError, PluginError
from spate.plugins._command import Command
from spate.plugins._entry_points import (
    FRONT_DOOR,
    FRONT_DOOR_EXTRAS,
    SPATE_CONNECTORS,
    EntryPointInfo,
    front_door_requirements,
    install_hint,
    is_installed,
    normalize,
    scan,
)
from spate.plugins._factory import COMMANDS_GROUP, ComponentFactory, PluginKind

logger = logging.getLogger(__name__)

COMMAND_KIND = "command"
"""The ``kind`` shown for CLI subcommands in :meth:`Registry.plugins`."""


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """One installed plugin as ``spate plugins`` shows it."""

    name: str
    kind: str
    """``source``, ``sink``, ``deserializer``, ``coordination_store`` or ``command``."""
    distribution: str
    version: str
    target: str
    """What the entry point names (``module:attribute``)."""


def _kind_of(group: str) -> str:
    if group == COMMANDS_GROUP:
        return COMMAND_KIND
    for kind in PluginKind:
        if kind.group == group:
            return kind.value
    raise ValueError(f"not a spate entry-point group: {group}")


def _as_kind(kind: PluginKind | str) -> PluginKind:
    if isinstance(kind, PluginKind):
        return kind
    try:
        return PluginKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in PluginKind)
        raise PluginError(f"unknown plugin kind {kind!r} (expected one of {known})") from None


class Registry:
    """Installed plugins, loaded lazily by name. Thread-safe.

    ``path`` restricts the search to those directories (as ``sys.path`` entries);
    by default the running interpreter's ``sys.path`` is searched.
    """

    def __init__(self, *, path: Sequence[str] | None = None) -> None:
        self._path = list(path) if path is not None else None
        self._lock = threading.Lock()
        self._entries: list[EntryPointInfo] | None = None
        self._loaded: dict[tuple[str, str], object] = {}

    # --- discovery --------------------------------------------------------------------

    def _scan(self) -> list[EntryPointInfo]:
        with self._lock:
            if self._entries is None:
                groups = [kind.group for kind in PluginKind] + [COMMANDS_GROUP]
                self._entries = scan(groups, self._path)
                logger.debug("found %d spate entry points", len(self._entries))
            return self._entries

    def plugins(self, kind: PluginKind | str | None = None) -> list[PluginInfo]:
        """Every installed plugin (of ``kind``, if given), sorted by kind, then name."""
        wanted = None
        if kind is not None:
            wanted = COMMAND_KIND if kind == COMMAND_KIND else _as_kind(kind).value
        infos = [
            PluginInfo(
                name=ep.name,
                kind=_kind_of(ep.group),
                distribution=ep.distribution,
                version=ep.version,
                target=ep.value,
            )
            for ep in self._scan()
        ]
        if wanted is not None:
            infos = [info for info in infos if info.kind == wanted]
        return sorted(infos, key=lambda p: (p.kind, p.name, p.distribution))

    def names(self, kind: PluginKind | str) -> list[str]:
        """Names of the installed plugins of ``kind``."""
        return sorted({info.name for info in self.plugins(kind)})

    def _entry(self, group: str, name: str) -> EntryPointInfo | None:
        matches = [ep for ep in self._scan() if ep.group == group and ep.name == name]
        if len(matches) > 1:
            owners = ", ".join(f"{ep.distribution} ({ep.value})" for ep in matches)
            raise PluginError(f"{name!r} in {group} is declared by more than one package: {owners}")
        return matches[0] if matches else None

    def _load(self, info: EntryPointInfo) -> object:
        key = (info.group, info.name)
        with self._lock:
            if key in self._loaded:
                return self._loaded[key]
        try:
            obj = info.entry_point.load()
        except Exception as exc:
            raise PluginError(
                f"{_kind_of(info.group)} {info.name!r} from {info.distribution} {info.version} "
                f"could not be loaded ({info.value}): {type(exc).__name__}: {exc}"
            ) from exc
        with self._lock:
            self._loaded.setdefault(key, obj)
            return self._loaded[key]

    # --- connectors -------------------------------------------------------------------

    def factory(
        self, kind: PluginKind | str, name: str, *, path: str = ""
    ) -> ComponentFactory[Any, Any]:
        """The factory of connector ``name``; ``path`` (the config key) goes into errors.

        Raises ``MissingConnectorError`` when no installed distribution declares it and
        ``PluginError`` when it cannot be loaded or is not a factory.
        """
        plugin_kind = _as_kind(kind)
        info = self._entry(plugin_kind.group, name)
        if info is None:
            install = self.install_hint(plugin_kind, name)
            close = [] if install else self.suggestions(plugin_kind, name)
            raise MissingConnectorError(
                plugin_kind.value,
                name,
                install,
                path=path,
                did_you_mean=close,
                installed=self.names(plugin_kind),
            )
        obj = self._load(info)
        model = getattr(obj, "config_model", None)
        if not (isinstance(model, type) and dataclasses.is_dataclass(model)):
            raise PluginError(
                f"{plugin_kind.value} {name!r} ({info.value} from {info.distribution}) is not "
                "a spate factory: it has no config_model dataclass"
            )
        if not callable(getattr(obj, "build", None)):
            raise PluginError(
                f"{plugin_kind.value} {name!r} ({info.value} from {info.distribution}) is not "
                "a spate factory: it has no build(config, context) method"
            )
        return obj  # type: ignore[return-value]  # shape checked just above

    def config_model(self, kind: str, name: str, path: str) -> type[Any]:
        """The config model of connector ``name`` (the config loader's resolver)."""
        model: type[Any] = self.factory(kind, name, path=path).config_model
        return model

    # --- commands ---------------------------------------------------------------------

    def commands(self) -> list[PluginInfo]:
        """CLI subcommands other distributions contribute."""
        return self.plugins(COMMAND_KIND)

    def command(self, name: str) -> Command:
        """Load subcommand ``name``; ``PluginError`` if it is missing or malformed."""
        info = self._entry(COMMANDS_GROUP, name)
        if info is None:
            raise PluginError(f"no command named {name!r} is installed")
        obj = self._load(info)
        if not isinstance(obj, Command):
            raise PluginError(
                f"command {name!r} ({info.value} from {info.distribution}) needs help, "
                "configure(parser) and run(args)"
            )
        return obj

    # --- install hints (B26) ----------------------------------------------------------

    def _extras(self) -> dict[str, set[str]]:
        """The front door's extras → the spate distributions each pulls in."""
        requirements = front_door_requirements(self._path)
        extras: dict[str, set[str]] = {}
        for req in requirements or ():
            if req.extra is not None:
                extras.setdefault(req.extra, set()).add(req.name)
        if not extras:  # not installed (or an unrelated project of the same name)
            extras = {extra: set(dists) for extra, dists in FRONT_DOOR_EXTRAS.items()}
        return extras

    def install_hint(self, kind: PluginKind | str, name: str) -> str | None:
        """How to install the distribution providing connector ``name``, if it is one of
        spate's: its name, the front door's extra, and the install from a spate checkout
        (spate is not on the public package index yet, see ADR 0003). None for a name no
        known distribution provides: a guessed package name could be anybody's."""
        found = self._providing(_as_kind(kind), normalize(name))
        if found is None:
            return None
        extra, dist = found
        if is_installed(dist, self._path):
            # Installed, yet it does not declare the name: installing it cannot help.
            return None
        own_extra = None
        if extra.startswith(f"{dist.removeprefix(f'{FRONT_DOOR}-')}-"):
            own_extra = extra.partition("-")[2]  # coordination-nats: its [nats] extra
        return install_hint(dist, extra, dist_extra=own_extra)

    def _providing(self, plugin_kind: PluginKind, wanted: str) -> tuple[str, str] | None:
        """(extra, distribution) for connector ``wanted``: the extra named like it, else
        one pulling in ``spate-<name>``, else one whose dashed name contains it."""
        own_dist = f"{FRONT_DOOR}-{wanted}"
        # Stores live in the coordination distribution, whatever their own names.
        kind_dist = (
            f"{FRONT_DOOR}-coordination" if plugin_kind is PluginKind.COORDINATION_STORE else None
        )
        extras = self._extras()
        extra = wanted if wanted in extras else _extra_providing(extras, own_dist)
        if extra is None:
            partial = [e for e in extras if wanted in e.split("-")]
            if partial:
                extra = min(partial, key=lambda e: (len(extras[e]), len(e), e))
        if extra is None and kind_dist is not None:
            extra = _extra_providing(extras, kind_dist)
        if extra is None:
            return None
        dists = extras[extra]
        for dist in (own_dist, kind_dist):
            if dist in dists:
                return extra, dist
        return extra, min(dists)

    def suggestions(self, kind: PluginKind | str, name: str) -> list[str]:
        """Installed or known connector names close to ``name`` (a typo's "did you mean")."""
        plugin_kind = _as_kind(kind)
        # Connector names of this kind only: an extra (clickhouse-embedded) is no sink.
        known = set(SPATE_CONNECTORS.get(plugin_kind.value, {}))
        candidates = sorted(set(self.names(plugin_kind)) | known)
        return difflib.get_close_matches(normalize(name), candidates, n=3, cutoff=0.6)


def _extra_providing(extras: dict[str, set[str]], dist: str) -> str | None:
    """The extra that pulls in ``dist`` with the least else (``kafka`` before ``full``)."""
    providing = [extra for extra, names in extras.items() if dist in names]
    if not providing:
        return None
    suffix = dist.removeprefix(f"{FRONT_DOOR}-")
    return min(providing, key=lambda e: (e != suffix, len(extras[e]), e))


def default_registry() -> Registry:
    """A registry over the running interpreter's installed distributions."""
    return Registry()
