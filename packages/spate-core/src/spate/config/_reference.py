"""The configuration reference, rendered from the config models themselves (B17).

:func:`render_reference` turns a list of :class:`Section` (a YAML key prefix and a
config dataclass) into Markdown: one table per model with every key, its type, its
default and the field's docstring (the string literal written under the field), nested
models expanded under their dotted prefix. The framework sections come from
:data:`FRAMEWORK_SECTIONS`; connector sections are whatever the plugin registry lists,
so a connector's model is documented by installing it and regenerating. The committed
page is checked against this renderer by a test, so it cannot drift from the code.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import textwrap
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from spate._secrets import Secret
from spate.config._decode import _Unit, yaml_key
from spate.config._units import format_duration, format_size
from spate.config.models import (
    AdminConfig,
    BackpressureConfig,
    CheckpointConfig,
    DeadLetterSettings,
    MetricsConfig,
    PipelineSection,
    ReadinessConfig,
    SupervisorConfig,
)


@dataclass(frozen=True, slots=True)
class Section:
    """One model to document: ``key`` is its YAML prefix (``sinks.<name>.clickhouse``)."""

    key: str
    model: type[Any]
    title: str | None = None
    note: str = ""
    """Text printed under the heading, before the model's own description."""


FRAMEWORK_SECTIONS: tuple[Section, ...] = (
    Section("pipeline", PipelineSection),
    Section("checkpoint", CheckpointConfig),
    Section("backpressure", BackpressureConfig),
    Section("admin", AdminConfig),
    Section("metrics", MetricsConfig),
    Section("readiness", ReadinessConfig),
    Section(
        "dead_letter",
        DeadLetterSettings,
        note="`dead_letter.sink` is a sink connector section, like `sink:` "
        "(`{kafka: {...}}`, `{clickhouse: {...}}`, ...), documented under Sinks below.",
    ),
    Section("supervisor", SupervisorConfig),
)


def field_docs(model: type[Any]) -> dict[str, str]:
    """Field name → the docstring written under it, for ``model`` and its bases."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls is object or not dataclasses.is_dataclass(cls):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        tree = ast.parse(source)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def describe_type(tp: Any) -> str:
    """A reader's name for a field type (``duration``, ``size``, ``one of a, b`` …)."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        if _Unit.DURATION in extras:
            return "duration"
        if _Unit.SIZE in extras:
            return "size"
        return describe_type(base)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        text = " or ".join(describe_type(a) for a in options)
        return f"{text} (optional)" if len(options) < len(get_args(tp)) else text
    if origin is Literal:
        return "one of " + ", ".join(f"`{_spell(v)}`" for v in get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in tp)
    if origin in (list, tuple) or tp in (list, tuple):
        items = [a for a in get_args(tp) if a is not Ellipsis]
        return f"list of {describe_type(items[0])}" if items else "list"
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        pair = get_args(tp)
        return f"mapping of {describe_type(pair[1])}" if len(pair) == 2 else "mapping"
    if dataclasses.is_dataclass(tp):
        return "section"
    if tp is Any or tp is object:
        return "any"
    names = {bool: "boolean", int: "integer", float: "number", str: "string", Secret: "secret"}
    return names.get(tp, str(tp))


def _spell(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def describe_default(field: dataclasses.Field[Any], tp: Any) -> str:
    """The default of ``field`` as YAML would spell it, or ``required``.

    A field whose model refuses its default (an empty ``table``) says so with
    ``metadata={"required": True}``: it is documented as required, not by its default.
    """
    if field.metadata.get("required"):
        return "required"
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        if not (dataclasses.is_dataclass(value) or isinstance(value, (list, tuple, Mapping))):
            # Computed per process (a host name, a nonce): no fixed value to document.
            return "computed at start"
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "see below"
    extras = get_args(tp)[1:] if get_origin(tp) is Annotated else ()
    if _Unit.DURATION in extras and isinstance(value, (int, float)):
        return f"`{format_duration(float(value))}`"
    if _Unit.SIZE in extras and isinstance(value, int):
        return f"`{format_size(value)}`"
    if isinstance(value, (list, tuple)):
        return "`[" + ", ".join(_spell(v) for v in value) + "]`"
    if isinstance(value, Mapping):
        return "`{}`" if not value else "`" + str(dict(value)) + "`"
    if isinstance(value, str) and value == "":
        return '`""`'
    return f"`{_spell(value)}`"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _nested_model(tp: Any) -> type[Any] | None:
    """The dataclass inside ``tp`` worth its own table (``X``, ``X | None``, ``list[X]``)."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return tp
    origin = get_origin(tp)
    if origin is Annotated:
        return _nested_model(get_args(tp)[0])
    if origin in (Union, types.UnionType, list, tuple):
        for arg in get_args(tp):
            found = _nested_model(arg)
            if found is not None:
                return found
    return None


def render_model(key: str, model: type[Any], level: int = 3) -> list[str]:
    """Markdown for ``model`` at YAML prefix ``key``: its table, then nested models."""
    hints = get_type_hints(model, include_extras=True)
    docs = field_docs(model)
    fields = [f for f in dataclasses.fields(model) if f.init]
    if not fields:
        return ["No settings: write `{}`.", ""]
    # A model's own keys first, then those it shares with others through a base model.
    own = inspect.get_annotations(model)
    fields.sort(key=lambda f: f.name not in own)
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    nested: list[tuple[str, type[Any]]] = []
    for f in fields:
        tp = hints[f.name]
        name = yaml_key(f)
        inner = _nested_model(tp)
        text = docs.get(f.name, "")
        if not text and inner is not None:
            text = _intro(inner).split(". ")[0].rstrip(".") + "." if _intro(inner) else ""
        lines.append(
            f"| `{name}` | {_cell(describe_type(tp))} | {_cell(describe_default(f, tp))} "
            f"| {_cell(text)} |"
        )
        if inner is not None:
            suffix = "[]" if get_origin(tp) in (list, tuple) else ""
            nested.append((f"{key}.{name}{suffix}", inner))
    out = [*lines, ""]
    for sub_key, sub_model in nested:
        out += [f"{'#' * min(level + 1, 6)} `{sub_key}`", ""]
        intro = _intro(sub_model)
        if intro:
            out += [intro, ""]
        out += render_model(sub_key, sub_model, level + 1)
    return out


def _intro(model: type[Any]) -> str:
    doc = inspect.getdoc(model) or ""
    if doc.startswith(f"{model.__name__}(") or not doc:
        return ""  # the dataclass-generated signature, not prose
    return doc.split("\n\n")[0].replace("\n", " ")


def render_sections(sections: Iterable[Section], level: int = 3) -> list[str]:
    """Markdown for several sections, each under its own heading."""
    out: list[str] = []
    for section in sections:
        out += [f"{'#' * level} {section.title or f'`{section.key}`'}", ""]
        if section.note:
            out += [section.note, ""]
        intro = _intro(section.model)
        if intro:
            out += [intro, ""]
        out += render_model(section.key, section.model, level)
    return out
