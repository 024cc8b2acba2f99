"""The ``deserializer: {json: ...}`` section: framing, error policy and an optional target type.

Owns the config model only; spate's strict decoder refuses unknown keys with their
dotted path (B17), and ``config_errors`` holds the cross-field rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from spate import ErrorPolicy
from spate.config import SchemaSource

__all__ = [
    "JsonConfig",
    "JsonFraming",
    "JsonSchemaSource",
]

JsonFraming = Literal["single", "ndjson", "array"]

_TARGET = re.compile(r"^[^:\s]+:[A-Za-z_][\w.]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonSchemaSource(SchemaSource):
    """A JSON Schema given ``inline:`` (JSON text) or by ``path:`` to a file.

    A relative ``path`` is resolved against the working directory of the process.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonConfig:
    """``deserializer: {json: ...}`` — decode JSON payloads with orjson."""

    framing: JsonFraming = "single"
    """``single``: one JSON value per payload (an empty payload holds no record);
    ``ndjson``: one value per line, a bad line is one bad record; ``array``: one JSON
    array per payload whose elements are the records, all or nothing (B21)."""
    on_error: ErrorPolicy = ErrorPolicy.SKIP
    """What the pipeline does with a record that cannot be decoded: skip it (counted),
    fail, or write it to the ``dead_letter`` sink with its error."""
    top_level: Literal["object", "any"] = "object"
    """``object``: every record must be a JSON object, anything else is a record error;
    ``any``: any JSON value is a record."""
    target: str | None = None
    """``package.module:Name`` of a dataclass: each record object is checked against its
    fields (required fields present, value types) and decoded into an instance."""
    schema: JsonSchemaSource | None = None
    """A JSON Schema (draft 2020-12 or 7) of the records: ``spate schema ddl`` and a
    ClickHouse sink's ``create_table: if_missing`` derive the table's columns from it.
    Records are not validated against it."""
    unknown_fields: Literal["error", "ignore"] = "error"
    """With ``target``: whether keys the dataclass does not declare are a record error."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.target is not None:
            if not _TARGET.match(self.target):
                yield "target", f"expected package.module:Name, got {self.target!r}"
            if self.top_level == "any":
                yield "top_level", "must be object when a target type is given"
