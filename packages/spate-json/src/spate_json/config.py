"""The ``deserializer: {json: ...}`` section: mode, framing, error policy, target type.

Owns the config model only; spate's strict decoder refuses unknown keys with their
dotted path (B17), and ``config_errors`` holds the cross-field rules. The registry keys
of ``mode: confluent`` (``registry:``, ``prewarm_subjects``, the waits and the error
policies) are spate-avro's :class:`~spate_avro.RegistrySettings`, so JSON, Avro and
Protobuf share one registry client and one set of rules (B30, B300).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from spate.config import SchemaSource
from spate_avro import RegistrySettings

__all__ = [
    "JsonConfig",
    "JsonFraming",
    "JsonMode",
    "JsonSchemaSource",
]

JsonFraming = Literal["single", "ndjson", "array"]
JsonMode = Literal["plain", "confluent"]

_TARGET = re.compile(r"^[^:\s]+:[A-Za-z_][\w.]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonSchemaSource(SchemaSource):
    """A JSON Schema given ``inline:`` (JSON text) or by ``path:`` to a file.

    A relative ``path`` is resolved against the working directory of the process.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonConfig(RegistrySettings):
    """``deserializer: {json: ...}`` — decode JSON payloads with orjson."""

    mode: JsonMode = "plain"
    """``plain``: the payload is JSON text; ``confluent``: Confluent's ``JSONSerializer``
    framing (magic byte 0, a 4-byte schema id, the JSON text), the record's JSON Schema
    fetched from the ``registry`` by its id (B300)."""
    validate: bool = False
    """``confluent`` only: check each record against its JSON Schema (``jsonschema``);
    a record that does not match is a record error under ``on_error`` (B302)."""
    framing: JsonFraming = "single"
    """``single``: one JSON value per payload (an empty payload holds no record);
    ``ndjson``: one value per line, a bad line is one bad record; ``array``: one JSON
    array per payload whose elements are the records, all or nothing (B21)."""
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
        yield from self.registry_errors(self.mode)
        if self.mode == "confluent":
            if self.framing != "single":
                yield "framing", "must be single in confluent mode (one record per payload)"
            for key in ("target", "schema"):
                if getattr(self, key) is not None:
                    yield key, "only used in plain mode (confluent schemas come from the registry)"
        elif self.validate:
            yield "validate", "only used in confluent mode"
        if self.target is not None:
            if not _TARGET.match(self.target):
                yield "target", f"expected package.module:Name, got {self.target!r}"
            if self.top_level == "any":
                yield "top_level", "must be object when a target type is given"
