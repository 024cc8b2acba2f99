"""Load a pipeline configuration: YAML, then interpolation, then strict decoding (B17, B18).

Order matters and is fixed:

1. the YAML is parsed (one document, a mapping at the top, no duplicate keys), keeping
   where each key stands so an error can say ``file:line:column``; a ``.toml`` file is
   parsed as TOML instead (the standard library's ``tomllib``), with the same sections
   and keys — its errors name the file and the dotted path, and the line for syntax
   errors only;
2. string values are interpolated from the environment (:mod:`spate.config._interpolate`),
   so substituted text is never parsed as YAML;
3. the framework sections are decoded into their models, ``sink``/``sinks`` checked, and
   each connector body decoded by that connector's own model, which the
   :class:`ConnectorResolver` (normally the plugin registry) supplies. The caller passes
   the resolver in (the CLI and :meth:`spate.Pipeline.from_config` pass the installed
   plugins; :func:`spate.load_config` does the same): this module never looks the plugin
   registry up itself, because the registry sits above configuration in the layering.
   Without a resolver the connector bodies are kept undecoded (``spec.config is None``)
   and the pipeline's assembly decodes them.

A file may hold several pipelines under ``pipelines:`` (a list, each item shaped like a
file of one pipeline, :func:`load_configs`). Next to the list, the top level may carry
the sections every pipeline shares: ``admin`` and ``metrics`` (one endpoint serves the
file's pipelines) and ``checkpoint``, ``backpressure``, ``supervisor`` and
``coordination`` as defaults, whose keys an item's own section overrides. Errors inside
an item name it by index: ``pipelines[1].sink.clickhouse.table``.

Every problem is one :class:`~spate.errors.ConfigError` naming the dotted key path, or a
:class:`~spate.errors.MissingConnectorError` naming the path, the connector and the
install command (B26, B29).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import yaml

from spate.config._decode import decode, join_path, unknown_key
from spate.config._interpolate import interpolate, mark_secrets
from spate.config.models import (
    AdminConfig,
    BackpressureConfig,
    CheckpointConfig,
    ConnectorSpec,
    DeadLetterSettings,
    MetricsConfig,
    PipelineConfig,
    PipelineSection,
    ReadinessConfig,
    SupervisorConfig,
)
from spate.errors import ConfigError, MissingConnectorError, SpateError, bare

logger = logging.getLogger(__name__)

RESERVED_SINK_NAMES = frozenset({"", "sink"})
"""Sink names a ``sinks:`` map may not use (``sink`` names the single-sink form)."""

_FRAMEWORK_SECTIONS: dict[str, type[Any]] = {
    "pipeline": PipelineSection,
    "checkpoint": CheckpointConfig,
    "backpressure": BackpressureConfig,
    "admin": AdminConfig,
    "metrics": MetricsConfig,
    "readiness": ReadinessConfig,
}
_CONNECTOR_SECTIONS = ("source", "deserializer", "sink", "sinks")
TOP_LEVEL_KEYS: tuple[str, ...] = (
    *_FRAMEWORK_SECTIONS,
    *_CONNECTOR_SECTIONS,
    "coordination",
    "dead_letter",
    "supervisor",
)
PIPELINES_KEY = "pipelines"
SHARED_ONLY_KEYS: tuple[str, ...] = ("admin", "metrics")
"""Sections of a ``pipelines:`` file that only the top level may give (one endpoint)."""
SHARED_DEFAULT_KEYS: tuple[str, ...] = ("checkpoint", "backpressure", "supervisor", "coordination")
"""Sections of a ``pipelines:`` file whose top-level keys every item inherits."""


class ConnectorResolver(Protocol):
    """Finds the config model of a connector (the plugin registry implements this)."""

    def config_model(self, kind: str, name: str, path: str) -> type[Any]:
        """The model for connector ``name`` of ``kind``; raise if it is not installed."""
        ...


Position = tuple[int, int]
Syntax = Literal["yaml", "toml"]


T = TypeVar("T")


def load_config(
    source: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    resolver: ConnectorResolver | None = None,
    check_connectors: bool = True,
) -> PipelineConfig:
    """Read, interpolate and validate the configuration file ``source``.

    A file named ``*.toml`` is read as TOML, any other as YAML. ``env`` defaults to
    ``os.environ``. Connector bodies are decoded through ``resolver`` (the installed
    plugins are :func:`spate.plugins.default_registry`); without one, or with
    ``check_connectors=False``, they are kept undecoded (``spec.config is None``).
    Raises ``ConfigError`` (or ``MissingConnectorError``) on the first problem.
    """
    path = Path(source)
    try:
        return parse_config(
            _read(path),
            file=str(path),
            env=env,
            resolver=resolver,
            check_connectors=check_connectors,
            syntax=_syntax(path),
        )
    except SpateError as exc:
        raise bare(exc, logger, "loading the configuration") from None


def _syntax(path: Path) -> Syntax:
    """TOML for a file named ``*.toml``, YAML for any other."""
    return "toml" if path.suffix.lower() == ".toml" else "yaml"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "", f"cannot read the configuration: {exc.strerror or exc}", file=str(path)
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "", f"the configuration is not UTF-8 text: {exc.reason}", file=str(path)
        ) from None


def load_configs(
    source: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    resolver: ConnectorResolver | None = None,
    check_connectors: bool = True,
) -> list[PipelineConfig]:
    """Every pipeline of the file ``source``: the items of its ``pipelines:`` list, or
    the one pipeline of a file without it. Raises like :func:`load_config`."""
    path = Path(source)
    return parse_configs(
        _read(path),
        file=str(path),
        env=env,
        resolver=resolver,
        check_connectors=check_connectors,
        syntax=_syntax(path),
    )


def parse_configs(
    text: str,
    *,
    file: str | None = None,
    env: Mapping[str, str] | None = None,
    resolver: ConnectorResolver | None = None,
    check_connectors: bool = True,
    syntax: Syntax = "yaml",
) -> list[PipelineConfig]:
    """Like :func:`load_configs` for YAML (or TOML) text already in memory."""
    return _parse(text, file, env, resolver, check_connectors, several=True, syntax=syntax)


def parse_config(
    text: str,
    *,
    file: str | None = None,
    env: Mapping[str, str] | None = None,
    resolver: ConnectorResolver | None = None,
    check_connectors: bool = True,
    syntax: Syntax = "yaml",
) -> PipelineConfig:
    """Like :func:`load_config` for YAML (or, with ``syntax="toml"``, TOML) text already
    in memory; ``file`` names it in errors.

    A file with a ``pipelines:`` list is refused: it holds several pipelines
    (:func:`parse_configs` reads them)."""
    (config,) = _parse(text, file, env, resolver, check_connectors, several=False, syntax=syntax)
    return config


def _parse(
    text: str,
    file: str | None,
    env: Mapping[str, str] | None,
    resolver: ConnectorResolver | None,
    check_connectors: bool,
    *,
    several: bool,
    syntax: Syntax = "yaml",
) -> list[PipelineConfig]:
    raw, positions = _parse_toml(text, file) if syntax == "toml" else _parse_yaml(text, file)
    try:
        data = mark_secrets(interpolate(raw, os.environ if env is None else env))
        resolver = resolver if check_connectors else None
        if isinstance(data, Mapping) and PIPELINES_KEY in data:
            if not several:
                raise ConfigError(
                    PIPELINES_KEY,
                    "this file defines several pipelines; run it with spate run, or read it "
                    "with load_configs",
                )
            return _build_many(data, file, resolver)
        return [_build(data, file, resolver)]
    except MissingConnectorError as exc:
        if exc.file is not None:
            raise
        found = _locate(positions, exc.path or "")
        line, column = found if found is not None else (None, None)
        raise exc.with_location(file=file, line=line, column=column) from None
    except ConfigError as exc:
        if exc.file is not None:
            raise
        line_col = _locate(positions, exc.path)
        if line_col is None:
            raise exc.with_location(file=file) from None
        raise exc.with_location(file=file, line=line_col[0], column=line_col[1]) from None


def _build_many(
    data: Mapping[str, object], file: str | None, resolver: ConnectorResolver | None
) -> list[PipelineConfig]:
    """The items of a ``pipelines:`` list, each with the shared top-level sections."""
    allowed = (PIPELINES_KEY, *SHARED_ONLY_KEYS, *SHARED_DEFAULT_KEYS)
    for key in data:
        if key not in allowed:
            why = unknown_key(str(key), allowed)
            if key in TOP_LEVEL_KEYS:
                why = (
                    f"belongs in each item of {PIPELINES_KEY} (the top level holds shared sections)"
                )
            raise ConfigError(str(key), why)
    items = data[PIPELINES_KEY]
    if not isinstance(items, list) or not items:
        raise ConfigError(PIPELINES_KEY, "expected a non-empty list of pipelines")
    shared: dict[str, object] = {}
    for key in (*SHARED_ONLY_KEYS, *SHARED_DEFAULT_KEYS):
        if data.get(key) is not None or (key == "supervisor" and key in data):
            value = data[key] if data[key] is not None else {}
            if not isinstance(value, Mapping):
                raise ConfigError(key, "expected a mapping")
            if key in _FRAMEWORK_SECTIONS or key == "supervisor":
                # Checked on its own first, so its mistakes are named at the top level.
                decode(_FRAMEWORK_SECTIONS.get(key, SupervisorConfig), value, key)
            shared[key] = value
    configs: list[PipelineConfig] = []
    names: dict[str, int] = {}
    for index, item in enumerate(items):
        prefix = join_path(PIPELINES_KEY, index)
        if not isinstance(item, Mapping):
            raise ConfigError(prefix, "expected a mapping shaped like a file of one pipeline")
        merged = dict(item)
        for key in SHARED_ONLY_KEYS:
            if key in item:
                raise ConfigError(
                    join_path(prefix, key),
                    f"one {key} section serves every pipeline of the file; give it at the "
                    "top level",
                )
            if key in shared:
                merged[key] = shared[key]
        for key in SHARED_DEFAULT_KEYS:
            if key in shared:
                own = item.get(key)
                if own is not None and not isinstance(own, Mapping):
                    raise ConfigError(join_path(prefix, key), "expected a mapping")
                base = shared[key]
                assert isinstance(base, Mapping)  # checked above
                merged[key] = {**base, **(own or {})}
        try:
            cfg = _build(merged, file, resolver)
        except MissingConnectorError as exc:
            raise MissingConnectorError(
                exc.kind,
                exc.name or "",
                exc.install,
                path=_under(prefix, exc.path or ""),
                did_you_mean=exc.did_you_mean,
                installed=exc.installed,
            ) from None
        except ConfigError as exc:
            raise ConfigError(_under(prefix, exc.path), exc.message) from None
        if cfg.name in names:
            raise ConfigError(
                join_path(prefix, "pipeline.name"),
                f"{cfg.name!r} also names {PIPELINES_KEY}[{names[cfg.name]}]; each pipeline "
                "of a file needs its own name",
            )
        names[cfg.name] = index
        configs.append(_within(cfg, prefix, index))
    return configs


def _under(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if path else prefix


def _within(cfg: PipelineConfig, prefix: str, index: int) -> PipelineConfig:
    """``cfg`` as item ``index`` of the list: its connector paths name the item."""

    def moved(spec: ConnectorSpec) -> ConnectorSpec:
        return dataclasses.replace(spec, path=_under(prefix, spec.path))

    return dataclasses.replace(
        cfg,
        source=moved(cfg.source),
        deserializer=moved(cfg.deserializer) if cfg.deserializer is not None else None,
        sinks={name: moved(spec) for name, spec in cfg.sinks.items()},
        dead_letter=moved(cfg.dead_letter) if cfg.dead_letter is not None else None,
        index=index,
    )


def load_section(source: str | os.PathLike[str], model: type[T], key: str) -> T:
    """Read one section from its own YAML file, as ``load_config`` reads a whole file:
    interpolated, secrets marked and ``<key>_file`` read (B67), decoded strictly into
    ``model``; errors name ``key``, the file, line and column (for command-line tools)."""
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(key, f"cannot read {path}: {exc}") from None
    raw, positions = _parse_yaml(text, str(path))
    try:
        return decode(model, mark_secrets(interpolate(raw, os.environ, key), key), key)
    except ConfigError as exc:
        found = _locate(positions, exc.path.removeprefix(key).lstrip("."))
        line, column = found if found is not None else (None, None)
        raise exc.with_location(file=str(path), line=line, column=column) from None


def decode_connector(spec: ConnectorSpec, resolver: ConnectorResolver) -> ConnectorSpec:
    """``spec`` with its body decoded by the connector's model from ``resolver``."""
    model = resolver.config_model(spec.kind, spec.tag, spec.path)
    config = decode(model, spec.body, spec.path)
    return dataclasses.replace(spec, config=config)


def _build(data: object, file: str | None, resolver: ConnectorResolver | None) -> PipelineConfig:
    if data is None:
        raise ConfigError("", "the configuration is empty; it needs at least source and sink")
    if not isinstance(data, Mapping):
        raise ConfigError("", "the configuration must be a mapping of sections at the top")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(str(key), unknown_key(str(key), TOP_LEVEL_KEYS))
    sections = {
        name: decode(model, data.get(name), name) for name, model in _FRAMEWORK_SECTIONS.items()
    }
    if data.get("source") is None:
        raise ConfigError("source", "required key is missing")
    source = _spec("source", "source", "source", data["source"])
    deserializer = None
    if data.get("deserializer") is not None:
        deserializer = _spec("deserializer", "deserializer", "deserializer", data["deserializer"])
    sinks, sinks_map = _sinks(data)
    coordination = data.get("coordination")
    if coordination is not None and not isinstance(coordination, Mapping):
        raise ConfigError("coordination", "expected a mapping")
    dead_letter, dead_letter_settings = _dead_letter(data.get("dead_letter"))
    # The supervisor is opt-in: the section's presence (even empty) turns it on.
    supervisor = (
        decode(SupervisorConfig, data.get("supervisor"), "supervisor")
        if "supervisor" in data
        else None
    )
    if resolver is not None:
        source = decode_connector(source, resolver)
        if dead_letter is not None:
            dead_letter = decode_connector(dead_letter, resolver)
        if deserializer is not None:
            deserializer = decode_connector(deserializer, resolver)
        sinks = {name: decode_connector(spec, resolver) for name, spec in sinks.items()}
    return PipelineConfig(
        pipeline=sections["pipeline"],
        checkpoint=sections["checkpoint"],
        backpressure=sections["backpressure"],
        admin=sections["admin"],
        metrics=sections["metrics"],
        readiness=sections["readiness"],
        source=source,
        deserializer=deserializer,
        sinks=sinks,
        sinks_map=sinks_map,
        coordination=dict(coordination) if coordination is not None else None,
        dead_letter=dead_letter,
        dead_letter_settings=dead_letter_settings,
        supervisor=supervisor,
        file=file,
    )


def _sinks(data: Mapping[str, object]) -> tuple[dict[str, ConnectorSpec], bool]:
    has_sink = data.get("sink") is not None
    has_sinks = data.get("sinks") is not None
    if has_sink and has_sinks:
        raise ConfigError("sinks", "give either sink (one sink) or sinks (named sinks), not both")
    if not has_sink and not has_sinks:
        raise ConfigError("sink", "required key is missing (give sink, or sinks for named sinks)")
    if has_sink:
        spec = _spec("sink", "sink", "sink", data["sink"])
        # The single sink's logs and metrics carry its connector's name ("sink
        # clickhouse: ..."), not the section's ("sink sink: ...").
        return {"sink": dataclasses.replace(spec, component=spec.tag)}, False
    raw = data["sinks"]
    if not isinstance(raw, Mapping):
        raise ConfigError("sinks", "expected a mapping of sink names to connector sections")
    if not raw:
        raise ConfigError("sinks", "must name at least one sink")
    sinks: dict[str, ConnectorSpec] = {}
    for name, body in raw.items():
        if not isinstance(name, str):
            raise ConfigError("sinks", f"sink names must be strings, got {name!r}")
        path = join_path("sinks", name)
        if name.strip() in RESERVED_SINK_NAMES:
            shown = "the empty name" if not name.strip() else repr(name)
            raise ConfigError(path, f"{shown} is reserved and cannot name a sink")
        sinks[name] = _spec("sink", name, path, body)
    return sinks, True


def _dead_letter(raw: object) -> tuple[ConnectorSpec | None, DeadLetterSettings]:
    """``dead_letter: {sink: {connector: {...}}, max_ratio: ..., ...}`` (B71)."""
    if raw is None:
        return None, DeadLetterSettings()
    if not isinstance(raw, Mapping):
        raise ConfigError("dead_letter", "expected a mapping with a sink section")
    if raw.get("sink") is None:
        raise ConfigError(
            "dead_letter.sink",
            "required key is missing (the sink dead letters go to, such as {kafka: {...}})",
        )
    spec = _spec("sink", "dead_letter", "dead_letter.sink", raw["sink"])
    settings = decode(
        DeadLetterSettings, {k: v for k, v in raw.items() if k != "sink"}, "dead_letter"
    )
    return spec, settings


def _spec(
    kind: Literal["source", "deserializer", "sink"], component: str, path: str, raw: object
) -> ConnectorSpec:
    if not isinstance(raw, Mapping) or len(raw) != 1:
        got = f"{len(raw)} keys" if isinstance(raw, Mapping) else f"{type(raw).__name__}"
        raise ConfigError(
            path,
            f"expected a single-key mapping naming the connector, such as {{kafka: {{...}}}}, "
            f"got {got}",
        )
    ((tag, body),) = raw.items()
    if not isinstance(tag, str) or not tag:
        raise ConfigError(path, f"the connector name must be a non-empty string, got {tag!r}")
    body_path = join_path(path, tag)
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        raise ConfigError(body_path, "expected a mapping of the connector's settings")
    return ConnectorSpec(kind=kind, tag=tag, component=component, path=body_path, body=body)


# --- YAML with positions -------------------------------------------------------------


def _parse_yaml(text: str, file: str | None) -> tuple[object, dict[str, Position]]:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(
            "",
            f"invalid YAML: {problem}",
            file=file,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError("", f"invalid YAML: {exc}", file=file) from None
    finally:
        loader.dispose()
    positions: dict[str, Position] = {}
    _walk(node, "", positions, file)
    return data, positions


_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def _parse_toml(text: str, file: str | None) -> tuple[object, dict[str, Position]]:
    """TOML has no positions to keep: errors past parsing name the file and key path."""
    try:
        return tomllib.loads(text), {}
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _TOML_AT.search(message)
        raise ConfigError(
            "",
            f"invalid TOML: {message[: at.start()] if at else message}",
            file=file,
            line=int(at[1]) if at else None,
            column=int(at[2]) if at else None,
        ) from None


def _walk(node: yaml.Node, path: str, positions: dict[str, Position], file: str | None) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            child = join_path(path, key)
            if key in seen and key != "<<":
                raise ConfigError(
                    child,
                    "duplicate key",
                    file=file,
                    line=key_node.start_mark.line + 1,
                    column=key_node.start_mark.column + 1,
                )
            seen.add(key)
            positions[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _walk(value_node, child, positions, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = join_path(path, index)
            positions[child] = (item.start_mark.line + 1, item.start_mark.column + 1)
            _walk(item, child, positions, file)


def _locate(positions: Mapping[str, Position], path: str) -> Position | None:
    """The position of ``path``, or of its nearest ancestor that has one."""
    while path:
        found = positions.get(path)
        if found is not None:
            return found
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None
