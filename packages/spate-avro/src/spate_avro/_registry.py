"""A Confluent-compatible schema-registry client with a positive and a negative cache.

Owns the HTTP calls (``GET /schemas/ids/{id}``, ``GET /subjects/{s}/versions/latest``,
``POST /subjects/{s}/versions``, ``GET /subjects`` as a reachability probe), basic auth,
the caches and the fetch schedule. Schemas are immutable per id, so a fetched schema is
kept for the life of the client. Upholds B21 and B28:

* a cache miss never blocks the pipeline thread for longer than ``fetch_wait``: the
  fetch runs on the client's own background thread, and until it succeeds the record
  is *not ready* (:class:`~spate.errors.DeserErrorKind.NOT_READY`) — the runtime keeps
  it and asks again later; it is never dropped;
* a failed fetch — an outage (connection refused, timeout, 5xx, 401/403) or a 404 for
  the id — is retried with capped exponential backoff: ``retry_backoff``, doubled per
  further failure, at most ``retry_backoff_max``. A 404 is *not* final: a registry
  follower that has not caught up answers so for an id registered a moment ago. Its
  wait is also capped by ``negative_cache_ttl``, which can only shorten it.
  :meth:`SchemaRegistryClient.missing` tells the deserializer how long the registry has
  said it does not know an id, so that it can give up after ``unknown_schema_timeout``;
* only a schema that cannot be used — not parseable as Avro, another ``schemaType``,
  with ``references`` — is negatively cached, for ``negative_cache_ttl``. Records with
  such an id are record errors (``SCHEMA_UNAVAILABLE``), skipped or failed by the
  deserializer's policy.

Start-up calls (:meth:`SchemaRegistryClient.probe`, :meth:`SchemaRegistryClient.latest`)
block and raise :class:`RegistryError` naming the endpoint (B29). :meth:`close` stops
the background thread; every request opens and closes its own connection, so nothing
is left open after it.

Other formats reuse the client: a ``parser`` given at construction turns the registry's
answer into that format's compiled schema (a ``ValueError`` from it is a permanent
answer, like an unparseable Avro schema), and ``query`` is appended to schema fetches
(``?format=serialized`` for Protobuf descriptors).
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spate import Clock, DeserError, DeserErrorKind, ErrorPolicy, SpateError

from spate_avro._schema import parse_schema_text
from spate_avro.config import RegistryConfig

logger = logging.getLogger(__name__)

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def split_credentials(url: str) -> tuple[str, str, str]:
    """``(url without userinfo, user, password)``: ``https://u:p@h`` is basic auth (B67)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, "", ""
    user, _, password = parts.netloc.rpartition("@")[0].partition(":")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return bare, urllib.parse.unquote(user), urllib.parse.unquote(password)


class RegistryError(SpateError):
    """A registry request failed; ``permanent`` is a schema that cannot be used.

    A 404 is not permanent (``status`` says 404): the registry may not know the id *yet*.
    """

    def __init__(
        self, url: str, reason: str, *, status: int | None = None, permanent: bool = False
    ) -> None:
        self.url = url
        self.reason = reason
        self.status = status
        self.permanent = permanent
        super().__init__(f"schema registry {url}: {reason}")


_STOP = -1
_MAX_DOUBLINGS = 30
"""Backoff doublings counted at most (the wait is capped long before; this bounds the
arithmetic)."""


@dataclass(slots=True)
class _Miss:
    """A schema id whose last fetch failed: when to ask again, and why it failed."""

    retry_at: float
    reason: str
    failures: int
    """Consecutive failed fetches (the backoff doubles with each)."""
    unknown_since: float | None
    """When the registry first answered 404 for the id; None if it never did."""


AnswerParser = Callable[["SchemaRegistryClient", int, dict[str, Any]], Any]
"""Turns a registry answer (``schema``, ``schemaType``, ``references``) into a compiled
schema; raises ``ValueError`` when it cannot, or ``RegistryError`` from the client."""


class SchemaRegistryClient:
    """Fetches and caches writer schemas by id. Thread-safe.

    Built by the Avro factory from ``registry:``; the deserializer calls :meth:`lookup`
    on the pipeline thread, everything else is for start-up and tests.
    """

    def __init__(
        self,
        config: RegistryConfig,
        *,
        clock: Clock,
        negative_cache_ttl: float,
        parser: AnswerParser | None = None,
        query: str = "",
    ) -> None:
        self._parser = parser
        self._query = query
        base, username, password = split_credentials(config.url)
        self._base = base.rstrip("/")
        self._timeout = config.timeout
        self._backoff = config.retry_backoff
        self._backoff_max = config.retry_backoff_max
        self._negative_ttl = negative_cache_ttl
        self._clock = clock
        self._headers = {"Accept": _CONTENT_TYPE}
        if not username:
            username, password = config.username or "", config.password or ""
        if username:
            token = f"{username}:{password}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(token).decode("ascii")
        elif config.token:
            self._headers["Authorization"] = f"Bearer {config.token}"
        self._tls: ssl.SSLContext | None = None
        if config.url.startswith("https://"):
            self._tls = ssl.create_default_context(cafile=config.ca or None)
            if config.cert:
                self._tls.load_cert_chain(config.cert, config.key)
        self._lock = threading.Lock()
        self._schemas: dict[int, Any] = {}
        self._negative: dict[int, tuple[float, str]] = {}
        self._misses: dict[int, _Miss] = {}
        self._inflight: dict[int, threading.Event] = {}
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._reachable = True

    @property
    def url(self) -> str:
        return self._base

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: the fetch thread is stopped."""
        return self._closed

    # -- blocking calls (start-up, tests, producers) ---------------------------------

    def probe(self) -> None:
        """Check the registry answers and accepts our credentials (``GET /subjects``).

        A 403 passes: the credentials were accepted, only listing subjects is not
        allowed (registries with per-subject access control answer so).
        """
        try:
            self._request("GET", "/subjects")
        except RegistryError as exc:
            if exc.status != 403:
                raise
            logger.info("schema registry %s does not allow listing subjects: %s", self._base, exc)

    def latest(self, subject: str) -> tuple[int, Any]:
        """The id and parsed schema of the latest version of ``subject``; caches it."""
        body = self._request("GET", f"/subjects/{_quote(subject)}/versions/latest{self._query}")
        if not isinstance(body, dict) or not isinstance(body.get("id"), int):
            raise RegistryError(self._base, f"unexpected answer for subject {subject!r}")
        schema_id = int(body["id"])
        parsed = self._parse_answer(schema_id, body)
        self._schemas[schema_id] = parsed
        return schema_id, parsed

    def version(self, subject: str, version: int | str) -> dict[str, Any]:
        """The raw answer for one version of ``subject`` (blocking; schema references)."""
        path = f"/subjects/{_quote(subject)}/versions/{version}{self._query}"
        body = self._request("GET", path)
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise RegistryError(
                self._base, f"subject {subject!r} version {version}: answer has no schema"
            )
        return body

    def register(self, subject: str, schema_text: str) -> int:
        """Register ``schema_text`` under ``subject``; returns its id (producers, tests)."""
        payload = json.dumps({"schema": schema_text}).encode()
        body = self._request("POST", f"/subjects/{_quote(subject)}/versions", payload)
        if not isinstance(body, dict) or not isinstance(body.get("id"), int):
            raise RegistryError(self._base, f"unexpected answer registering {subject!r}")
        return int(body["id"])

    def fetch(self, schema_id: int) -> Any:
        """Fetch and parse schema ``schema_id`` now (blocking); raises ``RegistryError``."""
        body = self._request("GET", f"/schemas/ids/{schema_id}{self._query}")
        return self._parse_answer(schema_id, body)

    # -- the pipeline thread's path ---------------------------------------------------

    def lookup(self, schema_id: int, wait: float) -> Any:
        """The parsed schema for ``schema_id`` from the cache, or a ``DeserError``.

        On a miss, starts a background fetch and waits up to ``wait`` seconds for it.
        Raises ``DeserError(NOT_READY)`` while the schema cannot be had yet and
        ``DeserError(SCHEMA_UNAVAILABLE)`` while a permanent answer is cached.
        """
        parsed = self._schemas.get(schema_id)
        if parsed is not None:
            return parsed
        now = self._clock.monotonic()
        negative = self._negative.get(schema_id)
        if negative is not None and negative[0] > now:
            raise DeserError(
                f"schema id {schema_id}: {negative[1]}", DeserErrorKind.SCHEMA_UNAVAILABLE
            )
        with self._lock:
            if self._closed:
                raise DeserError("schema registry client is closed", DeserErrorKind.NOT_READY)
            event = self._inflight.get(schema_id)
            if event is None:
                miss = self._misses.get(schema_id)
                if miss is not None and miss.retry_at > now:
                    raise DeserError(
                        f"schema id {schema_id} not fetched yet: {miss.reason}",
                        DeserErrorKind.NOT_READY,
                    )
                event = threading.Event()
                self._inflight[schema_id] = event
                self._start_worker()
                self._queue.put(schema_id)
        if wait > 0:
            event.wait(wait)
        parsed = self._schemas.get(schema_id)
        if parsed is not None:
            return parsed
        negative = self._negative.get(schema_id)
        if negative is not None:
            raise DeserError(
                f"schema id {schema_id}: {negative[1]}", DeserErrorKind.SCHEMA_UNAVAILABLE
            )
        miss = self._misses.get(schema_id)
        reason = miss.reason if miss is not None else f"being fetched from {self._base}"
        raise DeserError(
            f"schema id {schema_id} not fetched yet: {reason}", DeserErrorKind.NOT_READY
        )

    def missing(self, schema_id: int) -> tuple[float, str] | None:
        """Seconds since the registry first answered 404 for ``schema_id``, and its last
        answer; None while it never did (or the schema has been fetched since)."""
        miss = self._misses.get(schema_id)
        if miss is None or miss.unknown_since is None:
            return None
        return self._clock.monotonic() - miss.unknown_since, miss.reason

    def unknown_error(
        self, schema_id: int, timeout: float, policy: ErrorPolicy
    ) -> DeserError | None:
        """``UNKNOWN_SCHEMA`` for ``schema_id`` once the registry has answered 404 for it
        for ``timeout`` seconds (with the ``on_unknown_schema`` ``policy``); else None."""
        missing = self.missing(schema_id)
        if missing is None or missing[0] < timeout:
            return None
        waited, answer = missing
        return DeserError(
            f"schema id {schema_id} still unknown to the schema registry {self._base} "
            f"after {waited:.1f}s ({answer}; unknown_schema_timeout {timeout:g}s, "
            f"on_unknown_schema {policy.value})",
            DeserErrorKind.UNKNOWN_SCHEMA,
            policy=policy,
        )

    def close(self) -> None:
        """Stop the background fetcher (waits for a fetch in progress to time out)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker = self._worker
        if worker is not None:
            self._queue.put(_STOP)
            worker.join(self._timeout + 1.0)

    # -- internals ---------------------------------------------------------------------

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(
                target=self._run, name="spate-avro-registry", daemon=True
            )
            self._worker.start()

    def _run(self) -> None:
        while True:
            schema_id = self._queue.get()
            if schema_id == _STOP:
                return
            try:
                self._fetch_into_cache(schema_id)
            except Exception:  # top of the thread: never let a fetch kill the fetcher
                logger.exception("unexpected error fetching schema id %d", schema_id)
                self._failed(schema_id, "unexpected error in the registry client", None)
            finally:
                with self._lock:
                    event = self._inflight.pop(schema_id, None)
                if event is not None:
                    event.set()

    def _fetch_into_cache(self, schema_id: int) -> None:
        try:
            parsed = self.fetch(schema_id)
        except RegistryError as exc:
            if exc.permanent:
                now = self._clock.monotonic()
                self._negative[schema_id] = (now + self._negative_ttl, exc.reason)
                self._misses.pop(schema_id, None)
                logger.warning("schema id %d is unavailable: %s", schema_id, exc)
            else:
                self._failed(schema_id, exc.reason, exc.status)
                if exc.status != 404 and self._reachable:
                    self._reachable = False
                    logger.warning("schema registry unavailable, records wait: %s", exc)
            return
        self._schemas[schema_id] = parsed
        miss = self._misses.pop(schema_id, None)
        self._negative.pop(schema_id, None)
        if miss is not None and miss.unknown_since is not None:
            logger.info(
                "schema id %d found at %s after %.1fs unknown",
                schema_id,
                self._base,
                self._clock.monotonic() - miss.unknown_since,
            )
        if not self._reachable:
            self._reachable = True
            logger.info("schema registry %s reachable again", self._base)

    def _failed(self, schema_id: int, reason: str, status: int | None) -> None:
        """Schedule the next fetch of ``schema_id`` after a failed one (fetch thread)."""
        now = self._clock.monotonic()
        miss = self._misses.get(schema_id)
        failures = 1 if miss is None else miss.failures + 1
        wait = min(self._backoff * 2 ** min(failures - 1, _MAX_DOUBLINGS), self._backoff_max)
        unknown_since = None if miss is None else miss.unknown_since
        if status == 404:
            wait = min(wait, self._negative_ttl)  # negative caching only shortens the wait
            if unknown_since is None:
                unknown_since = now
                logger.warning(
                    "schema id %d not found at %s; its records wait for it",
                    schema_id,
                    self._base,
                )
        self._misses[schema_id] = _Miss(now + wait, reason, failures, unknown_since)

    def _parse_answer(self, schema_id: int, body: object) -> Any:
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise RegistryError(
                self._base, f"schema id {schema_id}: answer has no schema", permanent=True
            )
        if self._parser is not None:
            try:
                return self._parser(self, schema_id, body)
            except ValueError as exc:
                raise RegistryError(
                    self._base, f"schema id {schema_id}: {exc}", permanent=True
                ) from None
        schema_type = body.get("schemaType", "AVRO")
        if schema_type != "AVRO":
            raise RegistryError(
                self._base,
                f"schema id {schema_id} is a {schema_type} schema, not Avro",
                permanent=True,
            )
        if body.get("references"):
            raise RegistryError(
                self._base,
                f"schema id {schema_id} uses schema references, which are not supported",
                permanent=True,
            )
        try:
            return parse_schema_text(str(body["schema"]))
        except ValueError as exc:
            raise RegistryError(
                self._base, f"schema id {schema_id}: {exc}", permanent=True
            ) from None

    def _request(self, method: str, path: str, data: bytes | None = None) -> object:
        url = self._base + path
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = _CONTENT_TYPE
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(
                request, timeout=self._timeout, context=self._tls
            ) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_message(exc)
            # Never permanent: a 404 may only mean the registry does not know the id yet.
            raise RegistryError(url, f"HTTP {exc.code}: {detail}", status=exc.code) from None
        except urllib.error.URLError as exc:
            raise RegistryError(url, f"unreachable: {exc.reason}") from None
        except (OSError, ValueError) as exc:  # timeouts, resets, malformed responses
            raise RegistryError(url, f"request failed: {exc}") from None
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise RegistryError(url, "answer is not JSON") from None


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
    except (OSError, ValueError):
        return exc.reason if isinstance(exc.reason, str) else "error"
    if isinstance(body, dict) and "message" in body:
        code = body.get("error_code")
        return (
            f"{body['message']} (error_code {code})" if code is not None else str(body["message"])
        )
    return str(body)
