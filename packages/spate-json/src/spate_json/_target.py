"""Field checking for a ``target:`` dataclass: JSON object in, dataclass instance out.

Owns the translation of a dataclass's type hints into one converter function, built
once at start-up. Supported field types: ``str``, ``int``, ``float`` (an integer is
accepted and made a float), ``bool``, ``None``, ``Any``/``object``, ``X | None``,
``Literal[...]`` of JSON scalars, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]`` and
nested dataclasses. A field without a default is required. Errors name the JSON path of
the offending value (``lines[2].qty: expected an integer, got string``) and are record
errors (B28).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from spate.plugins import import_reference

Converter = Callable[[Any], Any]


class FieldError(Exception):
    """A value does not fit the target type; ``path`` grows while the error unwinds."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []

    def render(self) -> str:
        where = "".join(reversed(self.path)).lstrip(".")
        return f"{where}: {self.message}" if where else self.message


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def load_target(spec: str) -> type[Any]:
    """Import ``package.module:Name``; raises ``ValueError`` when it is not a dataclass."""
    obj = import_reference(spec)
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise ValueError(f"{spec} is not a dataclass")
    return obj


def build_converter(target: type[Any], *, unknown_fields_error: bool) -> Converter:
    """A function checking a decoded JSON object against ``target`` and building it.

    Raises ``ValueError`` (at start-up) for a field type it cannot check.
    """
    return _dataclass_converter(target, unknown_fields_error, {})


def _dataclass_converter(
    cls: type[Any], strict: bool, seen: dict[type[Any], Converter]
) -> Converter:
    if cls in seen:
        return seen[cls]
    hints = get_type_hints(cls)
    plan: list[tuple[str, Converter, bool]] = []

    def convert(value: Any) -> Any:
        if type(value) is not dict:
            raise FieldError(f"expected an object, got {json_type(value)}")
        kwargs = {}
        matched = 0
        for name, field_convert, required in plan:
            if name in value:
                matched += 1
                try:
                    kwargs[name] = field_convert(value[name])
                except FieldError as exc:
                    exc.path.append("." + name)
                    raise
            elif required:
                raise FieldError(f"required field {name!r} is missing")
        if strict and matched != len(value):
            extra = sorted(set(value) - {name for name, _, _ in plan})
            raise FieldError(f"unknown field(s) {', '.join(map(repr, extra))}")
        return cls(**kwargs)

    seen[cls] = convert
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        try:
            field_convert = _converter(hints[field.name], strict, seen)
        except ValueError as exc:
            raise ValueError(f"{cls.__name__}.{field.name}: {exc}") from None
        plan.append((field.name, field_convert, required))
    return convert


def _identity(value: Any) -> Any:
    return value


def _expect(check: Callable[[Any], bool], what: str) -> Converter:
    def convert(value: Any) -> Any:
        if not check(value):
            raise FieldError(f"expected {what}, got {json_type(value)}")
        return value

    return convert


def _float(value: Any) -> Any:
    kind = type(value)
    if kind is float:
        return value
    if kind is int:
        return float(value)
    raise FieldError(f"expected a number, got {json_type(value)}")


def _converter(tp: Any, strict: bool, seen: dict[type[Any], Converter]) -> Converter:
    origin = get_origin(tp)
    if tp is Any or tp is object:
        return _identity
    if tp is str:
        return _expect(lambda v: type(v) is str, "a string")
    if tp is int:
        return _expect(lambda v: type(v) is int, "an integer")
    if tp is bool:
        return _expect(lambda v: type(v) is bool, "true or false")
    if tp is float:
        return _float
    if tp is None or tp is type(None):
        return _expect(lambda v: v is None, "null")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_converter(tp, strict, seen)
    if origin in (Union, types.UnionType):
        return _union(get_args(tp), strict, seen)
    if origin is Literal:
        allowed = get_args(tp)
        shown = ", ".join(repr(a) for a in allowed)

        def literal(value: Any) -> Any:
            for choice in allowed:
                if value == choice and type(value) is type(choice):
                    return value
            raise FieldError(f"expected one of {shown}, got {value!r}")

        return literal
    if origin is list or origin is tuple:
        args = get_args(tp)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise ValueError(f"unsupported field type {tp!r} (use tuple[X, ...])")
        item = _converter(args[0], strict, seen) if args else _identity
        as_tuple = origin is tuple

        def sequence(value: Any) -> Any:
            if type(value) is not list:
                raise FieldError(f"expected an array, got {json_type(value)}")
            out = []
            for i, element in enumerate(value):
                try:
                    out.append(item(element))
                except FieldError as exc:
                    exc.path.append(f"[{i}]")
                    raise
            return tuple(out) if as_tuple else out

        return sequence
    if origin is dict:
        key_tp, value_tp = get_args(tp) or (str, Any)
        if key_tp is not str:
            raise ValueError(f"unsupported field type {tp!r} (JSON object keys are strings)")
        item = _converter(value_tp, strict, seen)

        def mapping(value: Any) -> Any:
            if type(value) is not dict:
                raise FieldError(f"expected an object, got {json_type(value)}")
            out = {}
            for key, element in value.items():
                try:
                    out[key] = item(element)
                except FieldError as exc:
                    exc.path.append(f"[{key!r}]")
                    raise
            return out

        return mapping
    raise ValueError(f"unsupported field type {tp!r}")


def _union(options: tuple[Any, ...], strict: bool, seen: dict[type[Any], Converter]) -> Converter:
    nullable = type(None) in options
    rest = [o for o in options if o is not type(None)]
    if len(rest) != 1:
        raise ValueError("only X | None unions are supported")
    inner = _converter(rest[0], strict, seen)
    if not nullable:
        return inner

    def optional(value: Any) -> Any:
        return None if value is None else inner(value)

    return optional
