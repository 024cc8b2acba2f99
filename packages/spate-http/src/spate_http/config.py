"""Configuration of the polling HTTP source (``source: {http_poll: ...}``).

Owns :class:`HttpPollConfig` and its sections (decoded strictly by
:func:`spate.config.decode`, so unknown keys fail with their dotted path, B17) and
:func:`parse_window`, which reads ``dedupe_window`` as a number of ticks or a duration.

```yaml
source:
  http_poll:
    url: https://api.example.com/v1/readings
    headers:
      Authorization: "Bearer ${API_TOKEN}"   # every header value is a secret (B67)
    params: {station: all}
    interval: 1m
    timeout: 10s
    records: data.items          # or collector: my_module:readings
    key: [station_id, timestamp] # or key: my_module:reading_key
    dedupe_window: 1h            # or a number of ticks: 60
    state_path: /var/lib/spate/readings.state.json
    pagination: {next_link: links.next}
```
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from spate import Secret
from spate.config import Duration, parse_duration

from spate_http._query import masked_url

__all__ = [
    "HttpPollConfig",
    "HttpRetryConfig",
    "PaginationConfig",
    "Window",
]

_FUNCTION = re.compile(r"^[^:\s]+:[A-Za-z_][\w.]*$")


class Window(NamedTuple):
    """How long a delivered key keeps dropping repeats: ``ticks`` or ``seconds``."""

    ticks: int | None
    seconds: float | None


def parse_window(text: str) -> Window:
    """``"60"`` → 60 ticks, ``"1h"`` → 3600 seconds; ``ValueError`` otherwise."""
    stripped = text.strip()
    if stripped.isdigit():
        ticks = int(stripped)
        if ticks < 1:
            raise ValueError("a number of ticks must be at least 1")
        return Window(ticks, None)
    seconds = parse_duration(stripped)
    if seconds <= 0:
        raise ValueError("must be positive")
    return Window(None, seconds)


def is_function_ref(text: str) -> bool:
    """Whether ``text`` reads as ``package.module:function``."""
    return bool(_FUNCTION.match(text))


@dataclass(frozen=True, slots=True, kw_only=True)
class PaginationConfig:
    """``pagination:`` — follow a next link or a cursor within one tick."""

    next_link: str = ""
    """Dotted path to the next page's URL in the response (``links.next``); relative
    URLs are resolved against the page's own. Absent, null or empty: the last page."""
    cursor: str = ""
    """Dotted path to a cursor in the response (``meta.next_cursor``), sent back as the
    query parameter ``cursor_param`` for the next page. Absent, null or empty: the last
    page."""
    cursor_param: str = "cursor"
    """Query parameter that carries the cursor."""
    max_pages: int = 100
    """Pages one tick follows at most (a guard against a link that loops)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.next_link and self.cursor:
            yield "cursor", "give next_link or cursor, not both"
        if not self.cursor_param:
            yield "cursor_param", "must not be empty"
        if self.max_pages < 1:
            yield "max_pages", "must be at least 1"


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpRetryConfig:
    """``retry:`` — 429 and 5xx answers retried within one tick."""

    max_attempts: int = 5
    """Requests per page at most (the first one included) before the tick is given up."""
    backoff: Duration = 0.5
    """Wait before the first retry; doubles with each retry."""
    max_backoff: Duration = 30.0
    """The cap of one wait, a ``Retry-After`` header included."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_attempts < 1:
            yield "max_attempts", "must be at least 1"
        if self.backoff < 0:
            yield "backoff", "must not be negative"
        if self.max_backoff < self.backoff:
            yield "max_backoff", "must be at least backoff"


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpPollConfig:
    """``source: {http_poll: ...}`` — call a JSON API every ``interval`` (B74-B77).

    Each tick requests ``url`` (following ``pagination``), takes the records out of the
    response (``records`` or ``collector``), drops those whose ``key`` was delivered
    within ``dedupe_window`` and hands the rest out as JSON payloads (use the ``json``
    deserializer). Unbounded unless ``max_ticks`` is set.
    """

    url: str
    """The endpoint (``http://`` or ``https://``)."""
    method: Literal["GET", "POST"] = "GET"
    """HTTP method of every request."""
    headers: dict[str, Secret] = field(default_factory=dict)
    """Request headers. Every value is a secret: kept out of logs, errors and ``repr()``
    (B67); interpolate it from the environment (``"Bearer ${API_TOKEN}"``) or a file
    (``${file:/run/secrets/api}``)."""
    params: dict[str, str] = field(default_factory=dict)
    """Query parameters of the first page."""
    public_params: list[str] = field(default_factory=list)
    """Query parameters whose values may be shown. Every other query value — in ``url``
    (an API key such as ``?appid=...``), ``params``, a cursor or a next link — is a
    secret: ``***`` in spate's and httpx's log lines, errors and metrics (B131)."""
    interval: Duration = 60.0
    """Time from the start of one tick to the start of the next."""
    timeout: Duration = 10.0
    """Timeout of one request (connect, read, write and pool)."""
    records: str = ""
    """Dotted path to the list of records in the response (``data.items``; a number
    indexes a list). Empty: the response itself is the list (or one record)."""
    collector: str = ""
    """``package.module:function`` given the parsed response, returning the records (an
    iterable of JSON-encodable values); instead of ``records``."""
    key: list[str] | str | None = None
    """What makes two records the same reading: a list of dotted field paths
    (``[station_id, timestamp]``) or ``package.module:function`` given a record. None:
    no deduplication."""
    dedupe_window: str = "1h"
    """How long a delivered key drops repeats: a number of ticks (``60``) or a duration
    (``1h``)."""
    state_path: str = ""
    """File holding the source's checkpoint (the position and the delivered keys),
    written atomically after each commit. Empty: kept in memory only, so a restart
    delivers again what the API still returns."""
    on_error: Literal["skip", "fail"] = "skip"
    """A response that is not JSON, a ``records`` path that does not resolve, a
    collector that raises or a record without its key: ``skip`` (counted in
    ``spate_source_dropped_total``) or ``fail`` the pipeline."""
    retry: HttpRetryConfig = field(default_factory=HttpRetryConfig)
    """Retries of 429 and 5xx answers within one tick."""
    pagination: PaginationConfig = field(default_factory=PaginationConfig)
    """How one tick follows further pages."""
    max_ticks: int = 0
    """Stop after this many ticks and let the run finish (0: poll until stopped)."""
    stream: str = "http"
    """Name of the source's one lane (``http[0]``) in metrics and logs."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.url.startswith(("http://", "https://")):
            shown = masked_url(self.url, self.public_params)
            yield "url", f"expected an http:// or https:// URL, got {shown!r}"
        if self.records and self.collector:
            yield "collector", "give records or collector, not both"
        if self.collector and not is_function_ref(self.collector):
            yield "collector", f"expected package.module:function, got {self.collector!r}"
        if isinstance(self.key, str) and not is_function_ref(self.key):
            yield "key", f"expected a list of fields or package.module:function, got {self.key!r}"
        if isinstance(self.key, list) and (not self.key or not all(self.key)):
            yield "key", "list at least one field, none empty"
        try:
            parse_window(self.dedupe_window)
        except ValueError as exc:
            yield "dedupe_window", f"expected a number of ticks or a duration: {exc}"
        if self.interval <= 0:
            yield "interval", "must be positive"
        if self.timeout <= 0:
            yield "timeout", "must be positive"
        if self.max_ticks < 0:
            yield "max_ticks", "must not be negative"
        if not self.stream:
            yield "stream", "must not be empty"

    @property
    def window(self) -> Window:
        return parse_window(self.dedupe_window)
