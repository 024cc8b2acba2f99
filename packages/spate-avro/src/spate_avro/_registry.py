"""A Confluent-compatible schema-registry client with a positive and a negative cache.

Owns the HTTP calls (``GET /schemas/ids/{id}``, ``GET /subjects/{s}/versions/latest``,
``POST /subjects/{s}/versions``, ``GET /subjects`` as a reachability probe), basic auth,
and the caches. Schemas are immutable per id, so a fetched schema is kept for the life
of the client. Upholds B21 and B28:

* a cache miss never blocks the pipeline thread for longer than ``fetch_wait``: the
  fetch runs on the client's own background thread, and until it succeeds the record
  is *not ready* (:class:`~spate.errors.DeserErrorKind.NOT_READY`) — the runtime keeps
  it and asks again later; it is never dropped;
* an outage (connection refused, timeout, 5xx, 401/403, anything but the two answers
  below) is transient: the next attempt for that id waits ``retry_backoff``;
* only permanent answers are negatively cached for ``negative_cache_ttl``: a 404 for the
  id, or a schema the registry returns that is not a parseable Avro schema. Records
  with such an id are record errors (``SCHEMA_UNAVAILABLE``), skipped or failed by the
  deserializer's policy.

Start-up calls (:meth:`SchemaRegistryClient.probe`, :meth:`SchemaRegistryClient.latest`)
block and raise :class:`RegistryError` naming the endpoint (B29).

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
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from spate import Clock, DeserError, DeserErrorKind, SpateError

from spate_avro._config import RegistryConfig
from spate_avro._schema import parse_schema_text

logger = logging.getLogger(__name__)

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(SpateError):
    """A registry request failed; ``permanent`` answers are the 404 and bad-schema cases."""

    def __init__(
        self, url: str, reason: str, *, status: int | None = None, permanent: bool = False
    ) -> None:
        self.url = url
        self.reason = reason
        self.status = status
        self.permanent = permanent
        super().__init__(f"schema registry {url}: {reason}")


_STOP = -1

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
        self._base = config.url.rstrip("/")
        self._timeout = config.timeout
        self._backoff = config.retry_backoff
        self._negative_ttl = negative_cache_ttl
        self._clock = clock
        self._headers = {"Accept": _CONTENT_TYPE}
        if config.username:
            token = f"{config.username}:{config.password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(token).decode("ascii")
        self._lock = threading.Lock()
        self._schemas: dict[int, Any] = {}
        self._negative: dict[int, tuple[float, str]] = {}
        self._transient: dict[int, tuple[float, str]] = {}
        self._inflight: dict[int, threading.Event] = {}
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._reachable = True

    @property
    def url(self) -> str:
        return self._base

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
                failed = self._transient.get(schema_id)
                if failed is not None and failed[0] > now:
                    raise DeserError(
                        f"schema id {schema_id} not fetched yet: {failed[1]}",
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
        failed = self._transient.get(schema_id)
        reason = failed[1] if failed is not None else f"being fetched from {self._base}"
        raise DeserError(
            f"schema id {schema_id} not fetched yet: {reason}", DeserErrorKind.NOT_READY
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
                self._transient[schema_id] = (
                    self._clock.monotonic() + self._backoff,
                    "unexpected error in the registry client",
                )
            finally:
                with self._lock:
                    event = self._inflight.pop(schema_id, None)
                if event is not None:
                    event.set()

    def _fetch_into_cache(self, schema_id: int) -> None:
        try:
            parsed = self.fetch(schema_id)
        except RegistryError as exc:
            now = self._clock.monotonic()
            if exc.permanent:
                self._negative[schema_id] = (now + self._negative_ttl, exc.reason)
                self._transient.pop(schema_id, None)
                logger.warning("schema id %d is unavailable: %s", schema_id, exc)
            else:
                self._transient[schema_id] = (now + self._backoff, exc.reason)
                if self._reachable:
                    self._reachable = False
                    logger.warning("schema registry unavailable, records wait: %s", exc)
            return
        self._schemas[schema_id] = parsed
        self._transient.pop(schema_id, None)
        self._negative.pop(schema_id, None)
        if not self._reachable:
            self._reachable = True
            logger.info("schema registry %s reachable again", self._base)

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
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_message(exc)
            # 404 for a schema id or subject is an answer, not an outage.
            raise RegistryError(
                url, f"HTTP {exc.code}: {detail}", status=exc.code, permanent=exc.code == 404
            ) from None
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
