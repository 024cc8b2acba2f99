"""A ClickHouse replica's URL, parsed: ``http(s)://user:password@host:port`` or
``chdb://<dir>`` (the embedded engine).

Owns the URL grammar and its one-line errors, and the redacted form for logs (B67). Pure
parsing, importing nothing of the connector: the configuration checks URLs with it and
the client connects with the result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

__all__ = ["Endpoint", "EndpointError", "parse_endpoint"]

_MEMORY = (":memory:", "memory")


class EndpointError(ValueError):
    """A replica URL that cannot be used."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed replica URL."""

    url: str = field(repr=False)  # may carry user:password@ (B67)
    scheme: str
    host: str = ""
    port: int = 0
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    chdb_path: str | None = None
    """The absolute data directory for ``chdb://`` (``:memory:`` for an in-memory engine)."""

    @property
    def embedded(self) -> bool:
        return self.scheme == "chdb"

    def __str__(self) -> str:
        return self.redacted

    @property
    def redacted(self) -> str:
        """The URL without its password (for logs and errors)."""
        if self.embedded:
            return f"chdb://{self.chdb_path}"
        user = f"{self.user}@" if self.user else ""
        return f"{self.scheme}://{user}{self.host}:{self.port}"


def parse_endpoint(url: str) -> Endpoint:
    """Parse a replica URL; raise :class:`EndpointError` saying what is wrong."""
    text = url.strip()
    if text.startswith("chdb://"):
        location = text[len("chdb://") :]
        if not location:
            raise EndpointError(f"{url!r}: chdb:// needs a data directory, e.g. chdb://./data")
        if location in _MEMORY:
            return Endpoint(text, "chdb", chdb_path=":memory:")
        return Endpoint(text, "chdb", chdb_path=os.path.abspath(location))
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise EndpointError(f"{url!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise EndpointError(f"{url!r}: expected an http://, https:// or chdb:// URL")
    if not parts.hostname:
        raise EndpointError(f"{url!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise EndpointError(
            f"{url!r}: a replica URL is scheme://host:port only; put the database and "
            "settings in their own keys"
        )
    default_port = 8443 if parts.scheme == "https" else 8123
    return Endpoint(
        text,
        parts.scheme,
        host=parts.hostname,
        port=port or default_port,
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )
