"""A local JSON API test server for the polling HTTP source (a real server on loopback).

:class:`ApiServer` is the standard library's ``ThreadingHTTPServer`` on ``127.0.0.1``
in a thread, answering every request through an app function
``(request) -> Reply``. :class:`Readings` is the app the tests poll: an API that, like
a weather service's "latest readings" endpoint, answers each request with the most
recent ``overlap`` readings of a sequence that advances by ``step`` per request — so
consecutive polls repeat readings, and each distinct reading must be delivered once.
It pages its answer (``?cursor=`` or a ``links.next`` URL), and a test can queue
faults (a 429 with ``Retry-After``, a 503, a slow answer, a body that is not JSON)
that are served before the next regular answer.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    @classmethod
    def json(cls, value: object, status: int = 200) -> Reply:
        return cls(status, json.dumps(value).encode(), {"Content-Type": "application/json"})


App = Callable[[Request], Reply]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        request = Request(self.command, parts.path, query, dict(self.headers.items()))
        self.server.requests.append(request)
        reply = self.server.app(request)
        if reply.delay:
            time.sleep(reply.delay)
        try:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
            pass

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    app: App
    requests: list[Request]


class ApiServer:
    """A loopback HTTP server around ``app``; use as a context manager."""

    def __init__(self, app: App) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.app = app
        self._server.requests = []
        # A short poll interval: shutdown() waits up to one of them.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[Request]:
        return self._server.requests

    def __enter__(self) -> ApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def reading(n: int) -> dict[str, object]:
    """Reading number ``n``: three stations, one timestamp each."""
    return {"station_id": f"st-{n % 3}", "timestamp": 1_700_000_000 + n, "value": n * 0.5}


class Readings:
    """The "latest readings" API: each request advances the sequence by ``step``.

    ``GET /readings`` answers ``{"data": {"items": [...]}, "links": {"next": ...},
    "meta": {"next_cursor": ...}}`` with readings ``[head - overlap + 1 .. head]``
    (never below 0), ``page_size`` per page; later pages of one answer do not advance
    the sequence. ``limit`` caps the sequence: once the head reaches it, polls repeat
    the last readings, as does every poll while ``hold`` is set. Faults queued with
    :meth:`fail_next` are served first.
    """

    def __init__(
        self, *, overlap: int = 5, step: int = 2, page_size: int = 0, limit: int | None = None
    ) -> None:
        self.overlap = overlap
        self.step = step
        self.page_size = page_size
        self.limit = limit
        self.head = -1
        self.hold = False
        self.faults: deque[Reply] = deque()
        self.served: list[int] = []
        self._lock = threading.Lock()
        self._pages: dict[str, list[int]] = {}

    def fail_next(self, *replies: Reply) -> None:
        with self._lock:
            self.faults.extend(replies)

    def __call__(self, request: Request) -> Reply:
        with self._lock:
            if self.faults:
                return self.faults.popleft()
            cursor = request.query.get("cursor") or request.query.get("page")
            if cursor:
                numbers = self._pages.pop(cursor, [])
            else:
                top = self.head if self.hold and self.head >= 0 else self.head + self.step
                self.head = top if self.limit is None else min(top, self.limit - 1)
                numbers = list(range(max(0, self.head - self.overlap + 1), self.head + 1))
            size = self.page_size or len(numbers) or 1
            page, rest = numbers[:size], numbers[size:]
            links: dict[str, object] = {"next": None}
            meta: dict[str, object] = {"next_cursor": None}
            if rest:
                token = f"p{len(self.served)}-{rest[0]}"
                self._pages[token] = rest
                links["next"] = f"/readings?page={token}"
                meta["next_cursor"] = token
            self.served.extend(page)
        return Reply.json(
            {"data": {"items": [reading(n) for n in page]}, "links": links, "meta": meta}
        )


def collect_items(document: dict[str, Any]) -> list[object]:
    """A ``collector:`` for the readings API: the items, each tagged with its source."""
    return [{**item, "via": "collector"} for item in document["data"]["items"]]


def reading_key(record: dict[str, Any]) -> str:
    """A ``key:`` function for readings: station and timestamp in one string."""
    return f"{record['station_id']}@{record['timestamp']}"
