"""An HTTP proxy in front of an S3 endpoint that breaks the ranged GETs a test picks.

The S3 source's retries are proven against the real moto server: the source talks to
this proxy, which forwards every request to moto unchanged, except the ranged object
GETs that :attr:`S3FaultProxy.decide` marks:

* ``"cut"`` — the headers announce the whole body, half of it is sent, then the
  connection is closed: a download broken mid-way, which the AWS SDK does not retry
  (it has already returned the response), so the source sees a transient error;
* ``"deny"`` — ``403 AccessDenied``, an error no retry can fix;
* ``"slowdown"`` — ``503 SlowDown``, S3 throttling the request.

``decide(n, key)`` gets the 1-based number of the ranged GET (over the proxy's life) and
the object key; it returns ``None`` to forward the request as is.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import unquote, urlsplit

Fault = Literal["cut", "deny", "slowdown"] | None

_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)
_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_REFUSALS: dict[str, tuple[int, bytes]] = {"deny": (403, _DENIED), "slowdown": (503, _SLOW_DOWN)}
_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class S3FaultProxy:
    """Forwards to ``upstream`` (``http://host:port``) on a free loopback port."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.decide: Callable[[int, str], Fault] = lambda n, key: None
        self.gets = 0
        self.faults: list[tuple[int, str, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy._forward(self)

            do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> S3FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _fault_for(self, request: BaseHTTPRequestHandler) -> Fault:
        if request.command != "GET" or "range" not in {k.lower() for k in request.headers}:
            return None
        # Path-style: /bucket/key
        key = unquote(urlsplit(request.path).path).split("/", 2)[-1]
        with self._lock:
            self.gets += 1
            n = self.gets
            fault = self.decide(n, key)
            if fault is not None:
                self.faults.append((n, key, fault))
        return fault

    def _forward(self, request: BaseHTTPRequestHandler) -> None:
        fault = self._fault_for(request)
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else None
        if fault in _REFUSALS:
            status, answer = _REFUSALS[fault]
            request.send_response(status)
            request.send_header("Content-Type", "application/xml")
            request.send_header("Content-Length", str(len(answer)))
            request.end_headers()
            request.wfile.write(answer)
            return
        upstream = http.client.HTTPConnection(*self._upstream, timeout=30)
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
            upstream.request(request.command, request.path, body=body, headers=headers)
            reply = upstream.getresponse()
            data = reply.read()
        finally:
            upstream.close()
        request.send_response(reply.status, reply.reason)
        for name, value in reply.getheaders():
            if name.lower() not in _HOP_HEADERS:
                request.send_header(name, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if fault == "cut":
            request.wfile.write(data[: len(data) // 2])
            request.wfile.flush()
            request.close_connection = True
            return
        if request.command != "HEAD":
            request.wfile.write(data)
