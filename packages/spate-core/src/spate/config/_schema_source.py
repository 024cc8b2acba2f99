"""``schema: {inline: ... | path: ...}``: a schema given in the file or by a path to one.

The one model behind every connector section that takes a schema as text (the Avro
deserializer's writer and reader schemas, the JSON deserializer's JSON Schema): the same
YAML keys, the same rule (exactly one of the two, neither empty, B17) and the same way of
reading it. Parsing the text is the connector's business.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaSource:
    """A schema given ``inline:`` (JSON text) or by ``path:`` to a file.

    A relative ``path`` is resolved against the working directory of the process.
    Connectors subclass it only to describe their kind of schema.
    """

    inline: str | None = None
    """The schema as JSON text."""
    path: str | None = None
    """A file holding the schema as JSON."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if (self.inline is None) == (self.path is None):
            yield "", "give exactly one of inline or path"
        elif self.inline is not None and not self.inline.strip():
            yield "inline", "must not be empty"
        elif self.path is not None and not self.path.strip():
            yield "path", "must not be empty"

    @property
    def key(self) -> str:
        """The key the schema was given under (``inline`` or ``path``), for error paths."""
        return "inline" if self.inline is not None else "path"

    def read_text(self) -> str:
        """The schema text; raises ``ValueError`` naming the file when it cannot be read."""
        if self.inline is not None:
            return self.inline
        path = self.path or ""
        try:
            return Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ValueError(f"cannot read {path!r}: {reason}") from None
