"""One tick of the polling source: requests, retries, pagination and extraction (B75).

Owns :class:`Fetcher`, which runs on the source's own thread (never the pipeline
thread) and turns one tick into a sequence of :data:`Item` values: a :class:`Page` of
records (each with its key), a :class:`Problem` (a record error the pipeline thread
handles under ``on_error``) and a final :class:`TickEnd`.

A 429 or 5xx answer is retried within the tick after a wait that doubles from
``retry.backoff``, or the answer's ``Retry-After`` (seconds or an HTTP date) when that is
longer, never more than ``retry.max_backoff``. Any other failure — a timeout, a refused
connection, another 4xx, retries used up — gives up the tick: counted in
``spate_source_requests_total{outcome="failed"}``, logged without headers, and the
next tick tries again. Pages handed out before the failure stay handed out; their
repeats on the next tick are dropped by key.
"""

from __future__ import annotations

import email.utils
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import httpx
from spate.metrics import CounterSeries

from spate_http._extract import MISSING, Extractor, KeyMaker, RecordProblem, lookup, parse_json
from spate_http._query import mask_urls, masked_url
from spate_http.config import HttpPollConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Row:
    """One record of a page: its JSON payload and its key (None without ``key``)."""

    payload: bytes
    key: str | None


@dataclass(frozen=True, slots=True)
class Page:
    tick: int
    at: float
    rows: list[Row]


@dataclass(frozen=True, slots=True)
class Problem:
    tick: int
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class TickEnd:
    tick: int


Item = Page | Problem | TickEnd


@dataclass(frozen=True, slots=True)
class RequestCounters:
    """The ``spate_source_requests_total`` series by outcome."""

    ok: CounterSeries
    retried: CounterSeries
    failed: CounterSeries


def retry_after(response: httpx.Response, now: float) -> float:
    """Seconds a ``Retry-After`` header asks for (0 when absent or unreadable)."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return 0.0
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - now)


def encode(record: Any) -> bytes:
    """A record as compact JSON bytes (what the ``json`` deserializer reads back)."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()


class Fetcher:
    """Runs ticks against the API with one ``httpx.Client``; stops when ``stop`` is set."""

    def __init__(
        self,
        config: HttpPollConfig,
        client: httpx.Client,
        extractor: Extractor,
        keys: KeyMaker | None,
        counters: RequestCounters,
        stop: threading.Event,
    ) -> None:
        self._cfg = config
        self._client = client
        self._extractor = extractor
        self._keys = keys
        self._counters = counters
        self._stop = stop
        self.where = masked_url(config.url, config.public_params)

    def tick(self, number: int, at: float) -> Iterator[Item]:
        """The items of tick ``number`` (started at wall time ``at``), ending with TickEnd."""
        url, params = self._cfg.url, dict(self._cfg.params)
        pagination = self._cfg.pagination
        for _ in range(pagination.max_pages):
            response = self._request(url, params)
            if response is None:
                break
            try:
                document = parse_json(response.content)
                records = self._extractor.records(document)
            except RecordProblem as problem:
                yield Problem(number, problem.reason, f"{self.where}: {problem.detail}")
                break
            rows: list[Row] = []
            for record in records:
                try:
                    key = self._keys.key(record) if self._keys is not None else None
                    rows.append(Row(encode(record), key))
                except RecordProblem as problem:
                    yield Problem(number, problem.reason, f"{self.where}: {problem.detail}")
                except (TypeError, ValueError) as exc:
                    yield Problem(number, "not_json", f"{self.where}: a record is not JSON ({exc})")
            yield Page(number, at, rows)
            following = self._next(document, str(response.url))
            if following is None:
                break
            url, params = following
        else:
            logger.warning(
                "%s: stopped after pagination.max_pages=%d pages in one tick",
                self.where,
                pagination.max_pages,
            )
        yield TickEnd(number)

    def _next(self, document: Any, current: str) -> tuple[str, dict[str, str]] | None:
        """The next page's URL and query parameters, or None on the last page."""
        pagination = self._cfg.pagination
        if pagination.next_link:
            link = lookup(document, pagination.next_link)
            if link is MISSING or not link or not isinstance(link, str):
                return None
            return urljoin(current, link), {}
        if pagination.cursor:
            cursor = lookup(document, pagination.cursor)
            if cursor is MISSING or cursor is None or cursor == "":
                return None
            return self._cfg.url, {**self._cfg.params, pagination.cursor_param: str(cursor)}
        return None

    def _request(self, url: str, params: dict[str, str]) -> httpx.Response | None:
        """The answer to one page request after retries; None when the tick gives up."""
        retry = self._cfg.retry
        delay = retry.backoff
        for attempt in range(1, retry.max_attempts + 1):
            try:
                # Merged into the URL's own query: httpx's params= would replace it,
                # dropping a key given inline in url (?appid=...).
                target = httpx.URL(url).copy_merge_params(params) if params else url
                response = self._client.request(self._cfg.method, target)
            except httpx.TimeoutException as exc:
                self._give_up(f"timed out after {self._cfg.timeout:g}s ({type(exc).__name__})")
                return None
            except httpx.HTTPError as exc:
                detail = mask_urls(str(exc), self._cfg.public_params)
                self._give_up(f"request failed: {type(exc).__name__}: {detail}")
                return None
            status = response.status_code
            if status == 429 or status >= 500:
                if attempt == retry.max_attempts:
                    self._give_up(f"HTTP {status} after {attempt} attempt(s)")
                    return None
                wait = min(max(delay, retry_after(response, time.time())), retry.max_backoff)
                self._counters.retried.inc()
                logger.info(
                    "%s: HTTP %d, retrying in %.2fs (attempt %d of %d)",
                    self.where,
                    status,
                    wait,
                    attempt,
                    retry.max_attempts,
                )
                if self._stop.wait(wait):
                    return None
                delay *= 2
                continue
            if status >= 400:
                self._give_up(f"HTTP {status}")
                return None
            self._counters.ok.inc()
            return response
        return None

    def _give_up(self, why: str) -> None:
        self._counters.failed.inc()
        logger.warning("%s: %s; the next tick tries again", self.where, why)
