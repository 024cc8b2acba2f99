"""The admin HTTP server: ``/metrics``, ``/healthz`` and ``/readyz`` (B22, B23).

The endpoints are documented in docs/guides/monitoring.md.

A ``ThreadingHTTPServer`` on a daemon thread, bound to ``admin.listen``. ``none`` binds
nothing (the server is never created); port 0 binds a free port, which
:attr:`AdminServer.port` then reports (and the start-up log line names). The default
address is loopback; when its port is taken (a second instance on one host) a free port
on loopback is bound instead and a warning names it, while any other address that is
taken fails naming ``admin.listen`` and the fix (B134). ``/metrics``
serves the pipeline's own prometheus registry in the text exposition format, or 404 when
``metrics.exporter`` is ``none``; with ``admin.metrics_auth`` it answers 401 unless the
request carries the configured basic-auth credentials or bearer token (B68). Every body
is passed through :func:`~spate.redact`, so no secret leaves by this door (B67). The
health endpoints read a health view attached at
start (the running pipeline's), so the server can be handed to
``Pipeline.add_service``.

Request handling never touches the pipeline thread: the health view answers from state
the runtime publishes.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from spate._secrets import redact
from spate.admin._probes import HealthView, healthz, readyz
from spate.config.models import DEFAULT_ADMIN_LISTEN, MetricsAuthConfig
from spate.errors import ConfigError

logger = logging.getLogger(__name__)


class _WithoutCreated:
    """The registry's metrics without the ``*_created`` samples prometheus-client adds to
    counters and histograms (creation timestamps nobody graphs, one per series)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            kept = [s for s in metric.samples if not s.name.endswith("_created")]
            if len(kept) == len(metric.samples):
                yield metric
                continue
            copy = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            copy.samples = kept
            yield copy


DISABLED = "none"


def parse_listen(listen: str) -> tuple[str, int] | None:
    """``"0.0.0.0:9090"`` → ``("0.0.0.0", 9090)``; ``"[::1]:0"`` → ``("::1", 0)``;
    ``"none"`` → None. Raises ``ConfigError`` at ``admin.listen`` otherwise."""
    if listen == DISABLED:
        return None
    host, sep, port = listen.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError("admin.listen", f"expected host:port or none, got {listen!r}")
    return host, int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], admin: AdminServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.admin = admin
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "spate-admin"

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        admin = self.server.admin
        route = self.path.split("?", 1)[0]
        content_type = "text/plain; charset=utf-8"
        if route == "/metrics" and not admin.authorized(self.headers.get("Authorization")):
            self._send(401, b"unauthorized\n", content_type, send_body, challenge=True)
            return
        if route == "/metrics" and admin.registry is not None:
            exposition = generate_latest(_WithoutCreated(admin.registry)).decode()
            status, body = 200, redact(exposition).encode()
            content_type = CONTENT_TYPE_LATEST
        elif route == "/healthz":
            status, text = healthz(admin.health, admin.stall_after)
            body = (redact(text) + "\n").encode()
        elif route == "/readyz":
            status, text = readyz(admin.health)
            body = (redact(text) + "\n").encode()
        else:
            status, body = 404, b"not found\n"
        self._send(status, body, content_type, send_body)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        send_body: bool,
        *,
        challenge: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if challenge:
            self.send_header("WWW-Authenticate", 'Basic realm="spate", charset="UTF-8"')
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("admin request from %s: %s", self.client_address[0], format % args)


class AdminServer:
    """Serves one pipeline's metrics and health on ``listen`` from a daemon thread.

    ``registry`` is the pipeline meter's prometheus registry, or None to answer 404 on
    ``/metrics`` (exporter ``none``). ``stall_after`` is ``admin.stall_after``.
    """

    def __init__(
        self,
        listen: str,
        *,
        registry: CollectorRegistry | None,
        stall_after: float = 30.0,
        pipeline: str = "",
        metrics_auth: MetricsAuthConfig | None = None,
    ) -> None:
        self.listen = listen
        self.metrics_auth = metrics_auth if metrics_auth is not None else MetricsAuthConfig()
        self.registry = registry
        self.stall_after = stall_after
        self.pipeline = pipeline
        self.health: HealthView | None = None
        self._address = parse_listen(listen)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header may read ``/metrics`` (B68)."""
        auth = self.metrics_auth
        if not auth.enabled:
            return True
        scheme, _, credentials = (header or "").strip().partition(" ")
        credentials = credentials.strip()
        if scheme.lower() == "bearer" and auth.token:
            return hmac.compare_digest(credentials.encode(), auth.token.encode())
        if scheme.lower() == "basic" and auth.user:
            try:
                given = base64.b64decode(credentials, validate=True)
            except (ValueError, binascii.Error):
                return False
            expected = f"{auth.user}:{auth.password}".encode()
            return hmac.compare_digest(given, expected)
        return False

    @property
    def enabled(self) -> bool:
        """False for ``listen: none``."""
        return self._address is not None

    @property
    def port(self) -> int | None:
        """The bound port (the chosen one for port 0), or None when not serving."""
        if self._server is None:
            return None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str | None:
        """``http://host:port`` of the running server, or None."""
        if self._server is None or self._address is None:
            return None
        host = self._address[0]
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    def start(self, health: HealthView | None = None) -> None:
        """Bind and serve; a port that cannot be bound is a ``ConfigError`` (B29).

        Called by the pipeline before its source starts (``Pipeline.add_service``).
        """
        if health is not None:
            self.health = health
        if self._address is None or self._server is not None:
            return
        try:
            server = _Server(self._address, self)
        except OSError as exc:
            server = self._fallback(exc)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"spate-admin-{self.pipeline or 'pipeline'}",
            daemon=True,
        )
        self._thread.start()
        host = self._address[0]
        bound = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        logger.info(
            "admin server listening on %s, reachable at %s (pipeline=%s)",
            bound,
            self.url,
            self.pipeline,
        )

    def _fallback(self, exc: OSError) -> _Server:
        """The server on a free port when the default address is taken; otherwise the
        ``ConfigError`` that names ``admin.listen`` and the fix (B134)."""
        reason = exc.strerror or str(exc)
        assert self._address is not None
        if self.listen != DEFAULT_ADMIN_LISTEN:
            raise ConfigError(
                "admin.listen",
                f"cannot listen on {self.listen}: {reason} (another process, perhaps another "
                "spate on this host, holds it: give each instance its own admin.listen, "
                "or port 0 for a free one, or none)",
            ) from None
        try:
            server = _Server((self._address[0], 0), self)
        except OSError as again:
            raise ConfigError(
                "admin.listen",
                f"cannot listen on {self.listen} ({reason}) nor on a free port: "
                f"{again.strerror or again}",
            ) from None
        logger.warning(
            "admin server: %s is taken (%s), so it serves on %s:%d instead; set "
            "admin.listen to fix the address (pipeline=%s)",
            self.listen,
            reason,
            self._address[0],
            server.server_address[1],
            self.pipeline,
        )
        return server

    def stop(self) -> None:
        """Stop serving and release the port. Safe to call more than once."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        logger.info("admin server stopped (pipeline=%s)", self.pipeline)
