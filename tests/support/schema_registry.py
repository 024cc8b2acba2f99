"""A schema-registry *test server*: the documented Confluent REST subset, standard library only.

No Confluent Schema Registry can be run on the machines this project is tested on, so
tests talk to this stand-in. It implements only what spate uses, with the registry's
documented status codes and error bodies (``{"error_code": ..., "message": ...}``):

* ``GET /schemas/ids/{id}`` → ``{"schema": ...}`` (+ ``schemaType`` when not Avro);
  404 / 40403 for an unknown id;
* ``GET /subjects/{subject}/versions/latest`` and ``GET /subjects/{subject}/versions/{n}``
  → ``{"subject", "version", "id", "schema"}``; 404 / 40401 for an unknown subject,
  404 / 40402 for an unknown version;
* ``POST /subjects/{subject}/versions`` with ``{"schema": ...}`` (and ``schemaType``,
  ``references``) → ``{"id": ...}`` (the same text under the same subject keeps its id);
  422 / 42201 when an Avro or JSON schema text is not JSON;
* ``POST /subjects/{subject}`` with ``{"schema": ...}`` → that schema's registration under
  the subject (how a serializer finds a reference's version); 404 / 40403 when absent;
* ``GET /subjects`` → the list of subjects (403 / 40301 when ``allow_listing`` is False,
  as a registry with per-subject access control answers);
* Protobuf (``schemaType: PROTOBUF``): schemas are kept and answered as registered, with
  their ``references``. confluent-kafka's serializer registers the serialized form (base64
  of a ``FileDescriptorProto``), which is what the registry answers to
  ``?format=serialized``; this server does not translate ``.proto`` text, so tests
  register the serialized form. Query strings are otherwise ignored;
* Apicurio Registry's ``POST /apis/registry/v2/groups/{group}/artifacts`` (the artifact id
  in ``X-Registry-ArtifactId``, the schema as the body, plain or as ``{"content": ...}``)
  registers under the subject named by the artifact id and answers the artifact's metadata
  with ``globalId`` = ``contentId`` = the Confluent id. That is all Apicurio's Kafka Connect
  converter (``apicurio.registry.as-confluent=true``) asks when it registers a schema, so
  its records carry ids the Confluent endpoints above resolve;
* optional HTTP basic auth or bearer token: 401 / 401 ``Unauthorized`` without the right
  credentials; optional HTTPS with a server ``ssl.SSLContext`` (``url`` is then
  ``https://localhost:PORT``).

Faults for tests: :meth:`SchemaRegistryServer.fail_with` answers every request with an
error status (``503`` by default, as a registry that lost its backing store does),
:meth:`SchemaRegistryServer.stop` closes the port (connection refused) and
:meth:`SchemaRegistryServer.start` reopens it on the same port, and
:meth:`SchemaRegistryServer.hide` answers 404 for one registered id for a while, as a
registry follower that has not caught up with its leader does for an id registered a
moment ago. ``requests`` counts the requests per path, so tests can see what the client
cached.

Use it as a context manager, or through the ``schema_registry`` fixture.
"""

from __future__ import annotations

import base64
import collections
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryServer:
    """An in-process registry on 127.0.0.1 (port 0 picks a free port)."""

    def __init__(
        self,
        *,
        username: str | None = None,
        password: str | None = None,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        port: int = 0,
    ) -> None:
        self._auth = None
        if username is not None:
            basic = f"{username}:{password or ''}".encode()
            self._auth = "Basic " + base64.b64encode(basic).decode("ascii")
        elif token is not None:
            self._auth = f"Bearer {token}"
        self._tls = tls
        self._lock = threading.Lock()
        self._schemas: dict[int, tuple[str, str]] = {}  # id -> (text, schemaType)
        self._subjects: dict[str, list[int]] = {}
        self._references: dict[int, list[dict[str, object]]] = {}
        self._next_id = 1
        self._failure: int | None = None
        self._hidden: dict[int, float] = {}  # id -> monotonic time it becomes visible
        self.requests: collections.Counter[str] = collections.Counter()
        self.allow_listing = True
        """False: ``GET /subjects`` answers 403, as with per-subject access control."""
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        if self._tls is not None:
            return f"https://localhost:{self._port}"
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> SchemaRegistryServer:
        """Listen (again, on the same port after :meth:`stop`)."""
        if self._server is not None:
            return self
        handler = _make_handler(self)
        server = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        server.daemon_threads = True
        if self._tls is not None:
            server.socket = self._tls.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="schema-registry-test-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the port: clients now get connection refused."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(5)

    def __enter__(self) -> SchemaRegistryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- contents and faults ---------------------------------------------------------

    def register(
        self,
        subject: str,
        schema: str | dict[str, Any] | list[Any],
        kind: str = "AVRO",
        references: list[dict[str, object]] | None = None,
    ) -> int:
        """Register a schema (text or JSON value) directly; returns its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        with self._lock:
            return self._register(subject, text, kind, references or [])

    def fail_with(self, status: int | None = 503) -> None:
        """Answer every request with ``status`` (None: back to normal)."""
        with self._lock:
            self._failure = status

    def hide(self, schema_id: int, seconds: float = float("inf")) -> None:
        """Answer 404 for ``schema_id`` during the next ``seconds`` (a lagging follower)."""
        with self._lock:
            self._hidden[schema_id] = time.monotonic() + seconds

    def reveal(self, schema_id: int) -> None:
        """Serve ``schema_id`` again (ends :meth:`hide` early)."""
        with self._lock:
            self._hidden.pop(schema_id, None)

    def hidden(self, schema_id: int) -> bool:
        """True while ``schema_id`` is answered with 404 by :meth:`hide`."""
        with self._lock:
            return self._is_hidden(schema_id)

    def _is_hidden(self, schema_id: int) -> bool:
        until = self._hidden.get(schema_id)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        del self._hidden[schema_id]
        return False

    def _register(
        self, subject: str, text: str, kind: str, references: list[dict[str, object]]
    ) -> int:
        versions = self._subjects.setdefault(subject, [])
        for schema_id in versions:
            if self._schemas[schema_id] == (text, kind):
                return schema_id
        for schema_id, known in self._schemas.items():
            if known == (text, kind):
                versions.append(schema_id)
                return schema_id
        schema_id = self._next_id
        self._next_id += 1
        self._schemas[schema_id] = (text, kind)
        if references:
            self._references[schema_id] = references
        versions.append(schema_id)
        return schema_id

    # -- request handling (called on the server's threads) ---------------------------

    def _handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, object]:
        self.requests[f"{method} {path}"] += 1
        with self._lock:
            if self._failure is not None:
                failure = self._failure
                if failure >= 500:
                    return failure, _error(
                        50003, "Error while forwarding the request to the leader"
                    )
                return failure, _error(failure, "Request failed")
            if self._auth is not None and headers.get("authorization") != self._auth:
                return 401, _error(401, "Unauthorized")
            parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
            if method == "GET" and parts == ["subjects"]:
                if not self.allow_listing:
                    return 403, _error(40301, "User is denied operation on this server.")
                return 200, sorted(self._subjects)
            if method == "GET" and len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
                return self._get_by_id(parts[2])
            if method == "POST" and len(parts) == 2 and parts[0] == "subjects":
                return self._lookup(parts[1], body)
            if (
                method == "POST"
                and len(parts) == 6
                and parts[:4] == ["apis", "registry", "v2", "groups"]
                and parts[5] == "artifacts"
            ):
                return self._create_artifact(parts[4], headers, body)
            if len(parts) >= 3 and parts[0] == "subjects" and parts[2] == "versions":
                subject = parts[1]
                if method == "GET" and len(parts) == 4:
                    return self._get_version(subject, parts[3])
                if method == "POST" and len(parts) == 3:
                    return self._post_version(subject, body)
            return 404, _error(404, "HTTP 404 Not Found")

    def _get_by_id(self, raw_id: str) -> tuple[int, object]:
        try:
            schema_id = int(raw_id)
        except ValueError:
            return 404, _error(40403, "Schema not found")
        entry = self._schemas.get(schema_id)
        if entry is None or self._is_hidden(schema_id):
            return 404, _error(40403, "Schema not found")
        return 200, self._answer(schema_id, {})

    def _answer(self, schema_id: int, answer: dict[str, object]) -> dict[str, object]:
        text, kind = self._schemas[schema_id]
        answer["schema"] = text
        if kind != "AVRO":
            answer["schemaType"] = kind
        if schema_id in self._references:
            answer["references"] = self._references[schema_id]
        return answer

    def _get_version(self, subject: str, version: str) -> tuple[int, object]:
        versions = self._subjects.get(subject)
        if not versions:
            return 404, _error(40401, f"Subject '{subject}' not found.")
        number = len(versions) if version == "latest" else int(version) if version.isdigit() else 0
        if not 1 <= number <= len(versions):
            return 404, _error(40402, f"Version {version} not found.")
        schema_id = versions[number - 1]
        return 200, self._answer(
            schema_id, {"subject": subject, "version": number, "id": schema_id}
        )

    def _lookup(self, subject: str, body: bytes) -> tuple[int, object]:
        versions = self._subjects.get(subject)
        if not versions:
            return 404, _error(40401, f"Subject '{subject}' not found.")
        try:
            request = json.loads(body)
            text, kind = request["schema"], str(request.get("schemaType", "AVRO"))
        except (ValueError, KeyError, TypeError):
            return 422, _error(42201, "Invalid schema")
        for number, schema_id in enumerate(versions, start=1):
            if self._schemas[schema_id] == (text, kind):
                answer = {"subject": subject, "version": number, "id": schema_id}
                return 200, self._answer(schema_id, answer)
        return 404, _error(40403, "Schema not found")

    def _post_version(self, subject: str, body: bytes) -> tuple[int, object]:
        try:
            request = json.loads(body)
            text = request["schema"]
            kind = str(request.get("schemaType", "AVRO"))
            references = list(request.get("references") or [])
            if kind in ("AVRO", "JSON"):
                json.loads(text)
            elif not isinstance(text, str):
                raise TypeError(text)
        except (ValueError, KeyError, TypeError):
            return 422, _error(42201, "Invalid schema")
        return 200, {"id": self._register(subject, text, kind, references)}

    def _create_artifact(
        self, group: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, object]:
        subject = headers.get("x-registry-artifactid")
        kind = headers.get("x-registry-artifacttype", "AVRO").upper()
        try:
            text = body.decode()
            if "extended" in headers.get("content-type", ""):
                text = str(json.loads(text)["content"])
            if kind in ("AVRO", "JSON"):
                json.loads(text)
        except (ValueError, KeyError, TypeError):
            return 400, {"error_code": 400, "message": "Invalid artifact content"}
        if not subject:
            return 400, {"error_code": 400, "message": "X-Registry-ArtifactId is required"}
        schema_id = self._register(subject, text, kind, [])
        version = self._subjects[subject].index(schema_id) + 1
        return 200, {
            "groupId": group,
            "id": subject,
            "version": str(version),
            "type": kind,
            "state": "ENABLED",
            "globalId": schema_id,
            "contentId": schema_id,
            "references": [],
        }


def _error(code: int, message: str) -> dict[str, object]:
    return {"error_code": code, "message": message}


def _make_handler(registry: SchemaRegistryServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = urllib.parse.urlsplit(self.path).path
            status, answer = registry._handle(method, path, headers, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", _CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def log_message(self, format: str, *args: object) -> None:
            return  # keep test output clean

    return Handler


@pytest.fixture
def schema_registry() -> Iterator[SchemaRegistryServer]:
    """A fresh registry test server for one test."""
    with SchemaRegistryServer() as server:
        yield server
