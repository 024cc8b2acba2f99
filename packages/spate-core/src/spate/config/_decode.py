"""Map plain YAML data onto frozen config dataclasses, strictly (B17).

``decode(Model, raw, path)`` builds ``Model`` from a mapping. Every field of a config
model has a default, so omitted keys take it; unknown keys are refused with their dotted
path (``sinks.payments.clickhouse.batch.max_rowz: unknown key``). Field types drive
parsing:

* ``Duration`` (float seconds) and ``ByteSize`` (int bytes) accept units (``5s``,
  ``64KiB``), see :mod:`spate.config._units`;
* ``int`` / ``float`` / ``bool`` also accept the strings an interpolated value produces
  (``"5"``, ``"true"``), since ``${V}`` always substitutes text;
* ``Secret`` accepts a string and keeps it out of ``repr()`` and of redacted text (B67);
* ``Literal[...]`` and ``enum.Enum`` accept their values; nested dataclasses, ``list``,
  ``tuple[X, ...]``, ``dict[str, X]``, ``Mapping[str, X]`` and ``X | None`` recurse.

Cross-field rules: a model may define ``config_errors(self)`` yielding
``(relative_key, message)`` pairs; the first one is raised with its full dotted path.
A dataclass field may rename its YAML key with ``metadata={"key": "yaml-name"}``.
Connectors use this for their own sections, so every error in a config reads alike.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from spate._secrets import Secret, register_secret
from spate.config._units import parse_duration, parse_size
from spate.errors import ConfigError


class _Unit(enum.Enum):
    DURATION = "duration"
    SIZE = "size"


Duration = Annotated[float, _Unit.DURATION]
"""A duration in seconds, written with a unit in YAML (``500ms``, ``5s``, ``2m``)."""

ByteSize = Annotated[int, _Unit.SIZE]
"""A size in bytes, written with a unit in YAML (``64KiB``, ``1MB``) or as an integer."""

T = TypeVar("T")

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def unknown_key(key: str, valid: Iterable[str]) -> str:
    """The message for an unknown ``key``: the close valid keys first, then all of them."""
    names = sorted(valid)
    close = difflib.get_close_matches(key, names, n=2, cutoff=0.6)
    hint = "; did you mean " + " or ".join(repr(n) for n in close) + "?" if close else ""
    return f"unknown key{hint} (expected one of {', '.join(names)})"


def tls_file_errors(ca: str, cert: str, key: str) -> Iterator[tuple[str, str]]:
    """``(key, message)`` for TLS file settings: ``cert`` and ``key`` go together, and
    every named file exists (so ``spate validate`` catches a wrong path, B29)."""
    if bool(cert) != bool(key):
        yield "cert", "cert and key are given together (mutual TLS)"
    for name, path in (("ca", ca), ("cert", cert), ("key", key)):
        if path and not os.path.isfile(path):
            yield name, f"no such file: {path}"


def join_path(path: str, key: str | int) -> str:
    """``join_path("sinks.a", "batch")`` → ``"sinks.a.batch"``; list indexes in brackets."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def yaml_key(field: dataclasses.Field[Any]) -> str:
    """The YAML key of a dataclass field (its name unless renamed through metadata)."""
    key = field.metadata.get("key", field.name)
    return str(key)


def decode(model: type[T], raw: object, path: str = "") -> T:
    """Build config dataclass ``model`` from ``raw`` (a mapping or None), strictly.

    Raises :class:`~spate.errors.ConfigError` naming the dotted path of the first
    problem found.
    """
    if raw is None:
        raw = {}
    result = _decode_value(model, raw, path)
    return typing.cast(T, result)


def _decode_dataclass(model: type[Any], raw: object, path: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a mapping, got {_describe(raw)}")
    hints = get_type_hints(model, include_extras=True)
    fields = {yaml_key(f): f for f in dataclasses.fields(model) if f.init}
    for key in raw:
        if not isinstance(key, str):
            raise ConfigError(path, f"keys must be strings, got {key!r}")
        if key not in fields:
            raise ConfigError(join_path(path, key), unknown_key(key, fields))
    kwargs: dict[str, Any] = {}
    for key, field in fields.items():
        if key in raw:
            kwargs[field.name] = _decode_value(hints[field.name], raw[key], join_path(path, key))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(join_path(path, key), "required key is missing")
    try:
        instance = model(**kwargs)
    except ConfigError as exc:
        raise ConfigError(join_path(path, exc.path) if exc.path else path, exc.message) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(path, str(exc)) from None
    check = getattr(instance, "config_errors", None)
    if check is not None:
        for key, message in check():
            raise ConfigError(join_path(path, key) if key else path, message)
    return instance


def _decode_value(tp: Any, raw: object, path: str) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        for extra in extras:
            if extra is _Unit.DURATION:
                try:
                    return parse_duration(raw)
                except ValueError as exc:
                    raise ConfigError(path, str(exc)) from None
            if extra is _Unit.SIZE:
                try:
                    return parse_size(raw)
                except ValueError as exc:
                    raise ConfigError(path, str(exc)) from None
        return _decode_value(base, raw, path)
    if tp is Any or tp is object:
        return raw
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, raw, path)
    if origin in (Union, types.UnionType):
        return _decode_union(get_args(tp), raw, path)
    if origin is Literal:
        allowed = get_args(tp)
        for choice in allowed:
            if raw == choice and type(raw) is type(choice):
                return choice
        # YAML reads `off`, `none`, `yes` as booleans/null; match their spelling too.
        for choice in allowed:
            if isinstance(choice, str) and choice in _spellings(raw):
                return choice
        raise ConfigError(path, f"expected one of {_choices(allowed)}, got {_describe(raw)}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if raw == member.value or member.value in _spellings(raw):
                return member
        choices = _choices(tuple(m.value for m in tp))
        raise ConfigError(path, f"expected one of {choices}, got {_describe(raw)}")
    if origin in (list, tuple) or tp in (list, tuple):
        args = get_args(tp)
        item_tp = args[0] if args else Any
        if not isinstance(raw, list):
            raise ConfigError(path, f"expected a list, got {_describe(raw)}")
        items = [_decode_value(item_tp, item, join_path(path, i)) for i, item in enumerate(raw)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        args = get_args(tp)
        value_tp = args[1] if len(args) == 2 else Any
        if not isinstance(raw, Mapping):
            raise ConfigError(path, f"expected a mapping, got {_describe(raw)}")
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if not isinstance(key, str):
                key = _spell(key)
            out[key] = _decode_value(value_tp, value, join_path(path, key))
        return out
    if tp is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise ConfigError(path, f"expected true or false, got {_describe(raw)}")
    if tp is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw.strip())
            except ValueError:
                pass
        raise ConfigError(path, f"expected an integer, got {_describe(raw)}")
    if tp is float:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return float(raw)
        if isinstance(raw, str):
            try:
                return float(raw.strip())
            except ValueError:
                pass
        raise ConfigError(path, f"expected a number, got {_describe(raw)}")
    if tp is Secret:
        if not isinstance(raw, str):
            raise ConfigError(path, "expected a string")  # never the value: it is a secret
        register_secret(raw)
        return Secret(raw)
    if tp is str:
        if isinstance(raw, str):
            return raw
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return str(raw)
        raise ConfigError(path, f"expected a string, got {_describe(raw)}")
    raise TypeError(f"config field type {tp!r} at {path!r} is not supported by the decoder")


def _decode_union(options: Iterable[Any], raw: object, path: str) -> Any:
    options = tuple(options)
    if raw is None and type(None) in options:
        return None
    candidates = [o for o in options if o is not type(None)]
    errors: list[ConfigError] = []
    for option in candidates:
        try:
            return _decode_value(option, raw, path)
        except ConfigError as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    # Prefer the error that got deepest into the value: it names the real problem.
    deepest = max(errors, key=lambda e: len(e.path))
    raise deepest


def _spell(raw: object) -> str:
    if raw is True:
        return "true"
    if raw is False:
        return "false"
    if raw is None:
        return "none"
    return str(raw)


def _spellings(raw: object) -> tuple[str, ...]:
    """How a YAML 1.1 scalar may have been written before the parser typed it."""
    if raw is True:
        return ("true", "yes", "on")
    if raw is False:
        return ("false", "no", "off")
    if raw is None:
        return ("none", "null")
    return (str(raw),)


def _choices(values: Iterable[object]) -> str:
    return ", ".join(str(v) for v in values)


def _describe(raw: object) -> str:
    if raw is None:
        return "nothing"
    if isinstance(raw, Mapping):
        return "a mapping"
    if isinstance(raw, list):
        return "a list"
    return repr(raw)
