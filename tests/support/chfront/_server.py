"""The HTTP side of one front process: ClickHouse's HTTP interface over the chDB engine.

Owns the listener (closed and reopened on the same port for the ``refuse`` fault), the
request handler and the control endpoint. What a request may carry, as on a real server:

* the statement in the ``query`` parameter, the body, or both (parameter, newline, body);
  INSERT rows follow the statement in the same text (see ``_sql``);
* ``database``, ``default_format`` (or the ``X-ClickHouse-Format`` header), ``query_id``,
  ``session_id`` (``SET``/``USE`` persist per session), ``param_<name>`` query parameters;
  every other parameter is a setting applied to that request only;
* credentials by basic auth, ``X-ClickHouse-User``/``X-ClickHouse-Key`` or the
  ``user``/``password`` parameters, checked against the one configured user;
* ``Content-Encoding`` lz4/zstd/gzip/deflate on the body (concatenated frames decoded),
  chunked transfer encoding, and compressed responses with ``enable_http_compression=1``.

Answers carry ``X-ClickHouse-Summary``, ``-Query-Id``, ``-Format``, ``-Timezone`` and
``-Server-Display-Name``; errors carry ``X-ClickHouse-Exception-Code`` with the status a
real server uses for that code. Faults are injected under ``/__control/`` (a path a real
server never serves) or with SIGUSR1 (recover); see ``_faults`` for their meaning.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ._codec import choose_response_encoding, decode_body, encode_response
from ._engine import Engine, Outcome, quote_literal
from ._errors import (
    AUTHENTICATION_FAILED,
    NOT_IMPLEMENTED,
    READONLY,
    STD_EXCEPTION,
    ClickHouseError,
)
from ._faults import Fault, FaultSpecError, FaultState, RequestKind, parse_fault
from ._sql import READONLY_KEYWORDS, Statement, parse_request, set_assignments

logger = logging.getLogger(__name__)

CONTROL_PREFIX = "/__control/"

# URL parameters the HTTP interface consumes itself; every other one is a setting.
RESERVED_PARAMS = frozenset(
    {
        "query",
        "database",
        "default_format",
        "user",
        "password",
        "quota_key",
        "query_id",
        "session_id",
        "session_timeout",
        "session_check",
        "close_session",
        "compress",
        "decompress",
        "buffer_size",
        "wait_end_of_query",
        "client_protocol_version",
        "role",
        "stacktrace",
    }
)

_CONTENT_TYPES = {
    "TabSeparated": "text/tab-separated-values; charset=UTF-8",
    "TSV": "text/tab-separated-values; charset=UTF-8",
    "CSV": "text/csv; charset=UTF-8; header=absent",
    "JSON": "application/json; charset=UTF-8",
    "JSONCompact": "application/json; charset=UTF-8",
    "JSONEachRow": "application/x-ndjson; charset=UTF-8",
}


@dataclass
class _Session:
    settings: dict[str, str] = field(default_factory=dict)  # name -> SQL literal
    database: str | None = None


@dataclass
class _Stats:
    requests: int = 0
    inserts: int = 0
    inserted_rows: int = 0
    last_insert: dict[str, Any] | None = None


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


class FrontServer:
    """One simulated ClickHouse replica: a chDB data directory behind an HTTP listener.

    ``start`` opens the engine and listens; ``stop`` closes both. ``inject``/``recover`` are
    called by the control endpoint, fault timers and the SIGUSR1 handler (any thread).
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        data_dir: str,
        user: str = "default",
        password: str = "",
        display_name: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.tls = tls
        """Serve HTTPS with this server context (it may require client certificates)."""
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.user = user
        self.password = password
        self._display_name = display_name
        self.engine: Engine | None = None
        self.faults = FaultState()
        self.stats = _Stats()
        self._stats_lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._sessions_lock = threading.Lock()
        self._listen_lock = threading.RLock()
        self._server: _HttpServer | None = None
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    @property
    def display_name(self) -> str:
        return self._display_name or f"chfront-{self.port}"

    @property
    def listening(self) -> bool:
        return self._server is not None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Open the engine and start listening; blocks for the few seconds chDB needs."""
        self.engine = Engine(self.data_dir)
        self.listen(retry_for=0.0)

    def stop(self) -> None:
        """Stop listening, drop open connections and close the engine."""
        self._close_listener()
        if self.engine is not None:
            self.engine.close()

    def listen(self, retry_for: float = 10.0) -> None:
        """Listen on ``host:port`` (the port chosen at first start is kept for re-listening).

        Retries for ``retry_for`` seconds if the address is busy (a re-listen after ``refuse``
        may race the old socket), then raises OSError.
        """
        with self._listen_lock:
            if self._server is not None:
                return
            deadline = time.monotonic() + retry_for
            while True:
                try:
                    server = _HttpServer((self.host, self.port), self)
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.1)
            self.port = server.server_address[1]
            self._server = server
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name=f"chfront-listener-{self.port}",
                daemon=True,
            )
            thread.start()
            logger.info("listening on %s:%d as %s", self.host, self.port, self.display_name)

    def _close_listener(self) -> None:
        with self._listen_lock:
            server, self._server = self._server, None
            if server is not None:
                server.shutdown()
                server.server_close()
                logger.info("stopped listening on %s:%d", self.host, self.port)
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._connections_lock:
            if alive:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    # -- faults ----------------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        """Install a fault; ``refuse`` closes the listener at once (call after answering)."""
        generation = self.faults.set(fault)
        logger.info("fault injected: %s", fault.describe())
        if fault.deadline is not None:
            timer = threading.Timer(
                max(0.0, fault.deadline - time.monotonic()), self._expire, args=(generation,)
            )
            timer.daemon = True
            timer.start()
        if fault.mode == "refuse":
            self._close_listener()
        elif not self.listening:
            self.listen()

    def _expire(self, generation: int) -> None:
        if self.faults.clear(generation) is not None:
            logger.info("fault expired")
        if not self.listening:
            self.listen()

    def recover(self) -> None:
        """End any fault; listen again if the listener was closed."""
        previous = self.faults.clear()
        if previous is not None:
            logger.info("recovered from fault %s", previous.mode)
        if not self.listening:
            self.listen()

    def status(self) -> dict[str, Any]:
        with self._stats_lock:
            stats = {
                "requests": self.stats.requests,
                "inserts": self.stats.inserts,
                "inserted_rows": self.stats.inserted_rows,
                "last_insert": self.stats.last_insert,
            }
        return {
            "display_name": self.display_name,
            "host": self.host,
            "port": self.port,
            "version": self.engine.version if self.engine else None,
            "fault": self.faults.current.describe(),
            "faulted_requests": self.faults.affected,
            **stats,
        }

    # -- request state ---------------------------------------------------------------------

    def count_request(self) -> None:
        with self._stats_lock:
            self.stats.requests += 1

    def record_insert(self, info: dict[str, Any]) -> None:
        with self._stats_lock:
            self.stats.inserts += 1
            self.stats.inserted_rows += int(info["written_rows"])
            self.stats.last_insert = info

    def session_state(self, session_id: str | None) -> tuple[dict[str, str], str | None]:
        if not session_id:
            return {}, None
        with self._sessions_lock:
            session = self._sessions.get(session_id)
            if session is None:
                return {}, None
            return dict(session.settings), session.database

    def remember(self, session_id: str, statement: Statement) -> None:
        """Keep what a successful SET or USE changed for later requests of the session."""
        with self._sessions_lock:
            session = self._sessions.setdefault(session_id, _Session())
            if statement.keyword == "SET":
                session.settings.update(set_assignments(statement.sql))
            elif statement.keyword == "USE":
                name = statement.sql[3:].strip()
                if len(name) >= 2 and name[0] == name[-1] and name[0] in '`"':
                    name = name[1:-1]
                session.database = name


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], front: FrontServer) -> None:
        self.front = front
        super().__init__(address, _Handler)
        if front.tls is not None:
            # The handshake runs on the first read, in the connection's own thread, so a
            # client that never completes it cannot block the accept loop.
            self.socket = front.tls.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "chfront"
    sys_version = ""
    server: _HttpServer

    def setup(self) -> None:
        super().setup()
        self.server.front.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        except (OSError, ValueError):
            pass
        finally:
            self.server.front.track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.client_address[0], format % args)

    def do_GET(self) -> None:
        self._guarded("GET")

    def do_POST(self) -> None:
        self._guarded("POST")

    def _guarded(self, method: str) -> None:
        """Top of a request thread: an unexpected failure is logged and answered with 500."""
        try:
            self._handle(method)
        except Exception as exc:
            logger.exception("request %s %s failed unexpectedly", method, self.path)
            error = ClickHouseError.own(STD_EXCEPTION, f"{type(exc).__name__}: {exc}")
            self.close_connection = True
            self._send_error(error, "")

    # -- plumbing ----------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("connection closed inside a chunked body")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                chunk = self.rfile.read(size)
                if len(chunk) != size:
                    raise ConnectionError("connection closed inside a chunk")
                parts.append(chunk)
                self.rfile.readline(3)
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0:
            return b""
        body = self.rfile.read(length)
        if len(body) != length:
            raise ConnectionError("connection closed inside the body")
        return body

    def _send(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        try:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError, OSError):
            logger.debug("client went away before the answer was written")
            self.close_connection = True

    def _send_json(self, status: int, payload: Mapping[str, Any], close: bool = False) -> None:
        body = (json.dumps(payload, sort_keys=True) + "\n").encode()
        headers = {"Content-Type": "application/json"}
        if close:
            headers["Connection"] = "close"
        self._send(status, body, headers)

    def _send_error(self, error: ClickHouseError, query_id: str) -> None:
        front = self.server.front
        version = front.engine.version if front.engine else "unknown"
        self._send(
            error.status,
            error.body(version),
            {
                "Content-Type": "text/plain; charset=UTF-8",
                "X-ClickHouse-Server-Display-Name": front.display_name,
                "X-ClickHouse-Query-Id": query_id,
                "X-ClickHouse-Exception-Code": str(error.code),
            },
        )

    def _reset_connection(self) -> None:
        """Abort the connection with a TCP reset and no answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for stream in (self.wfile, self.rfile):
            with contextlib.suppress(OSError, ValueError):
                stream.close()
        with contextlib.suppress(OSError):
            self.connection.close()

    def _gate(self, kind: RequestKind, query_id: str) -> Fault | None:
        """Apply a pending fault. Returns the fault if the request is finished (answered or
        dropped), or a ``drop``-after fault the caller must honour after running; else None."""
        front = self.server.front
        taken = front.faults.take(kind)
        if taken is None:
            return None
        fault, release = taken
        logger.debug("fault %s applied to a %s request", fault.mode, kind)
        if fault.mode == "slow":
            release.wait(fault.delay)
            return None
        if fault.mode == "5xx":
            name = front.engine.error_name(fault.code) if front.engine else "UNKNOWN_EXCEPTION"
            error = ClickHouseError(
                fault.code, name, "Fault injected by the test server", status=fault.status
            )
            self._send_error(error, query_id)
            return fault
        if fault.mode == "drop" and fault.when == "after":
            return fault
        self._reset_connection()
        return fault

    # -- requests ----------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        front = self.server.front
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        try:
            raw = self._read_body()
        except (ConnectionError, ValueError) as exc:
            logger.debug("unreadable request body: %s", exc)
            self.close_connection = True
            return
        if url.path.startswith(CONTROL_PREFIX):
            self._control(url.path[len(CONTROL_PREFIX) :], params)
            return
        front.count_request()
        is_root_ping = url.path == "/" and "query" not in params and not raw
        if url.path in ("/ping", "/replicas_status") or is_root_ping:
            fault = self._gate("ping", "")
            if fault is None:
                self._send(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
            elif fault.mode == "drop" and fault.when == "after":
                self._reset_connection()
            return
        query_id = params.get("query_id") or str(uuid.uuid4())
        if url.path != "/":
            self._send_error(
                ClickHouseError(
                    NOT_IMPLEMENTED, "NOT_IMPLEMENTED", f"There is no handle {url.path}", status=404
                ),
                query_id,
            )
            return

        statement: Statement | None = None
        parse_error: ClickHouseError | None = None
        encoding = "none"
        frames = 0
        try:
            self._check_unsupported(params)
            decoded = decode_body(raw, self.headers.get("Content-Encoding"))
            encoding, frames = decoded.encoding, decoded.frames
            text = decoded.data
            if "query" in params:
                text = params["query"].encode() + b"\n" + text
            statement = parse_request(text)
        except ClickHouseError as exc:
            parse_error = exc

        kind: RequestKind = "insert" if statement is not None and statement.is_insert else "query"
        fault = self._gate(kind, query_id)
        if fault is not None and not (fault.mode == "drop" and fault.when == "after"):
            return
        try:
            self._authenticate(params)
            if parse_error is not None:
                raise parse_error
            assert statement is not None
            if method == "GET" and (
                statement.kind == "insert_data" or statement.keyword not in READONLY_KEYWORDS
            ):
                raise ClickHouseError.own(
                    READONLY,
                    "Cannot execute query in readonly mode. For queries over HTTP, method GET "
                    "implies readonly. You should use method POST for modifying queries",
                )
            outcome, output_format = self._execute(statement, params)
        except ClickHouseError as error:
            if fault is not None:
                self._reset_connection()
                return
            logger.debug("query %s failed: %s", query_id, error)
            self._send_error(error, query_id)
            return
        if statement.kind == "insert_data":
            front.record_insert(
                {
                    "written_rows": outcome.written_rows,
                    "written_bytes": outcome.written_bytes,
                    "encoding": encoding,
                    "frames": frames,
                    "format": statement.fmt,
                    "deduplication_token": params.get("insert_deduplication_token"),
                    "query_id": query_id,
                }
            )
        if fault is not None:  # drop after running: the write landed, the answer never comes
            self._reset_connection()
            return
        self._answer(statement, outcome, output_format, params, query_id)

    def _check_unsupported(self, params: Mapping[str, str]) -> None:
        if _truthy(params.get("compress")) or _truthy(params.get("decompress")):
            raise ClickHouseError.own(
                NOT_IMPLEMENTED,
                "ClickHouse-native HTTP compression (compress/decompress=1) is not supported by "
                "this test server; use Content-Encoding",
            )
        if self.headers.get("Content-Type", "").lower().startswith("multipart/"):
            raise ClickHouseError.own(
                NOT_IMPLEMENTED,
                "multipart requests (external data, form-encoded queries) are not supported by "
                "this test server",
            )

    def _authenticate(self, params: Mapping[str, str]) -> None:
        front = self.server.front
        user, password = "default", ""
        header = self.headers.get("Authorization")
        if header is not None:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "basic":
                raise ClickHouseError.own(
                    AUTHENTICATION_FAILED,
                    f"{scheme} authentication is not supported by this test server",
                )
            else:
                try:
                    decoded = base64.b64decode(token.strip(), validate=True).decode()
                except (binascii.Error, UnicodeDecodeError):
                    decoded = ""
                user, _, password = decoded.partition(":")
        elif self.headers.get("X-ClickHouse-User") is not None:
            user = self.headers.get("X-ClickHouse-User", "")
            password = self.headers.get("X-ClickHouse-Key", "")
        elif "user" in params:
            user, password = params["user"], params.get("password", "")
        if user != front.user or password != front.password:
            raise ClickHouseError.own(
                AUTHENTICATION_FAILED,
                f"{user or 'default'}: Authentication failed: password is incorrect, or there "
                "is no user with such name",
            )

    def _execute(self, statement: Statement, params: Mapping[str, str]) -> tuple[Outcome, str]:
        front = self.server.front
        assert front.engine is not None
        session_id = params.get("session_id") or None
        settings, session_database = front.session_state(session_id)
        for key, value in params.items():
            if key not in RESERVED_PARAMS and not key.startswith("param_"):
                settings[key] = quote_literal(value)
        default_format = params.get("default_format") or self.headers.get("X-ClickHouse-Format")
        default_format = default_format or "TabSeparated"
        outcome = front.engine.run(
            statement,
            settings=settings,
            database=params.get("database") or session_database,
            params={k[6:]: v for k, v in params.items() if k.startswith("param_")},
            default_format=default_format,
        )
        if session_id and statement.keyword in ("SET", "USE"):
            front.remember(session_id, statement)
        return outcome, statement.fmt or default_format

    def _answer(
        self,
        statement: Statement,
        outcome: Outcome,
        output_format: str,
        params: Mapping[str, str],
        query_id: str,
    ) -> None:
        front = self.server.front
        assert front.engine is not None
        summary = {
            "read_rows": str(outcome.read_rows),
            "read_bytes": str(outcome.read_bytes),
            "written_rows": str(outcome.written_rows),
            "written_bytes": str(outcome.written_bytes),
            "total_rows_to_read": "0",
            "result_bytes": str(len(outcome.body)),
            "elapsed_ns": str(outcome.elapsed_ns),
        }
        headers = {
            "Content-Type": _CONTENT_TYPES.get(output_format, "application/octet-stream")
            if statement.produces_result
            else "text/plain; charset=UTF-8",
            "X-ClickHouse-Server-Display-Name": front.display_name,
            "X-ClickHouse-Query-Id": query_id,
            "X-ClickHouse-Timezone": front.engine.timezone,
            "X-ClickHouse-Summary": json.dumps(summary, separators=(",", ":")),
        }
        if statement.produces_result:
            headers["X-ClickHouse-Format"] = output_format
        body = outcome.body
        if body and _truthy(params.get("enable_http_compression")):
            encoding = choose_response_encoding(self.headers.get("Accept-Encoding"))
            if encoding is not None:
                body = encode_response(body, encoding)
                headers["Content-Encoding"] = encoding
        self._send(200, body, headers)

    # -- control -----------------------------------------------------------------------

    def _control(self, action: str, params: Mapping[str, str]) -> None:
        front = self.server.front
        if action == "status":
            self._send_json(200, front.status())
            return
        if action == "recover" or (action == "fault" and params.get("mode") == "recover"):
            front.recover()
            self._send_json(200, front.status())
            return
        if action == "release":
            front.faults.release_held()
            self._send_json(200, front.status())
            return
        if action != "fault":
            self._send_json(404, {"error": f"unknown control action {action!r}"})
            return
        try:
            fault = parse_fault(params)
        except FaultSpecError as exc:
            self._send_json(400, {"error": str(exc)})
            return
        if fault.mode == "refuse":
            # Answer first: the listener and this very connection are closed right after.
            self._send_json(200, {**front.status(), "fault": fault.describe()}, close=True)
        front.inject(fault)
        if fault.mode != "refuse":
            self._send_json(200, front.status())
