"""A test server implementing the Hugging Face Hub's documented commit API, on loopback.

Not the Hub: a small real HTTP server that speaks the part of the Hub's API the
``huggingface`` sink uses, as ``huggingface_hub``'s ``create_commit`` and
``dataset_info`` call it, and keeps what was committed so tests can read it back:

* ``GET /api/datasets/{owner}/{name}/revision/{revision}`` — 200 with ``id``, ``sha``
  and ``siblings`` (the files), 404 for an unknown repository or branch;
* ``POST /api/datasets/{owner}/{name}/commit/{revision}`` — an
  ``application/x-ndjson`` body: a ``{"key": "header", "value": {"summary",
  "description"}}`` line, then ``{"key": "file", "value": {"content", "path",
  "encoding": "base64"}}`` lines; applied atomically, answered with ``commitOid`` and
  ``commitUrl``. A malformed body is answered 400 and changes nothing;
* ``GET /datasets/{owner}/{name}/resolve/{revision}/{path}`` — a committed file.

Requests need ``Authorization: Bearer <token>`` when the server has a token (401
otherwise, echoing what was presented — a test of the client's redaction). Faults for
tests: :meth:`HubServer.fail_commits` answers the next commits with a status (503, 429
with ``Retry-After``, ...), :meth:`HubServer.stall_commits` holds them without an
answer, and ``commit_delay`` keeps each commit in flight for a while. Every commit
counts how many commits to the same repository were in flight at once
(:attr:`HubServer.max_concurrent`), which the commit gate keeps at 1.

``python -m tests.support.hub --repo owner/name`` runs it on its own (for a demo): it
prints its address, and on SIGINT/SIGTERM the commits and files it received.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

_INFO = re.compile(r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/]+)$")
_COMMIT = re.compile(r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/commit/(?P<rev>[^/]+)$")
_RESOLVE = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


@dataclass
class Commit:
    """One applied commit."""

    oid: str
    repo: str
    revision: str
    summary: str
    description: str
    files: dict[str, bytes]
    body: bytes
    """The request body as received (NDJSON)."""


@dataclass
class _Fault:
    status: int
    retry_after: str | None = None
    stall: float = 0.0


@dataclass
class _Repo:
    branches: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"main": {}})
    in_flight: int = 0


class HubServer:
    """The test server; use as a context manager or call :meth:`start` / :meth:`stop`."""

    def __init__(self, token: str = "", commit_delay: float = 0.0) -> None:
        self.token = token
        self.commit_delay = commit_delay
        self.commits: list[Commit] = []
        self.attempts = 0
        """Commit requests received (failed ones included)."""
        self.answers: list[int] = []
        """The status of every commit request, in order."""
        self.max_concurrent = 0
        self._repos: dict[str, _Repo] = {}
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ---------------------------------------------------------------------

    def start(self) -> HubServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def create_repo(self, repo: str, branch: str = "main") -> None:
        with self._lock:
            self._repos.setdefault(repo, _Repo()).branches.setdefault(branch, {})

    def fail_commits(self, count: int, status: int = 503, retry_after: str | None = None) -> None:
        """Answer the next ``count`` commits with ``status`` (applying nothing)."""
        with self._lock:
            self._faults.extend(_Fault(status, retry_after) for _ in range(count))

    def stall_commits(self, count: int, seconds: float) -> None:
        """Hold the next ``count`` commits ``seconds`` without an answer, then drop them."""
        with self._lock:
            self._faults.extend(_Fault(0, stall=seconds) for _ in range(count))

    def heal(self) -> None:
        """Forget the faults not yet served."""
        with self._lock:
            self._faults.clear()

    def files(self, repo: str, branch: str = "main") -> dict[str, bytes]:
        """The files of a branch now."""
        with self._lock:
            return dict(self._repos[repo].branches[branch])

    # -- request handling (server threads) ---------------------------------------------

    def _authorized(self, header: str | None) -> bool:
        return not self.token or header == f"Bearer {self.token}"

    def _info(self, repo: str, revision: str) -> tuple[int, dict[str, object]]:
        with self._lock:
            found = self._repos.get(repo)
            branch = found.branches.get(revision) if found else None
            if branch is None:
                return 404, {"error": f"Repository {repo} or revision {revision} not found"}
            sha = hashlib.sha1(repr(sorted(branch)).encode()).hexdigest()
            return 200, {
                "id": repo,
                "sha": sha,
                "siblings": [{"rfilename": path} for path in sorted(branch)],
            }

    @contextmanager
    def _in_flight(self, repo: _Repo) -> Iterator[None]:
        with self._lock:
            repo.in_flight += 1
            self.max_concurrent = max(self.max_concurrent, repo.in_flight)
        try:
            yield
        finally:
            with self._lock:
                repo.in_flight -= 1

    def _commit(
        self, repo_id: str, revision: str, content_type: str, body: bytes
    ) -> tuple[int, dict[str, object], dict[str, str]]:
        with self._lock:
            self.attempts += 1
            fault = self._faults.pop(0) if self._faults else None
            repo = self._repos.get(repo_id)
        if fault is not None and fault.stall:
            time.sleep(fault.stall)
            return 0, {}, {}
        if fault is not None:
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            return fault.status, {"error": f"injected {fault.status}"}, headers
        if repo is None or revision not in repo.branches:
            return 404, {"error": f"Repository {repo_id} or revision {revision} not found"}, {}
        if content_type.split(";")[0].strip() != "application/x-ndjson":
            return 400, {"error": f"expected application/x-ndjson, got {content_type}"}, {}
        with self._in_flight(repo):
            try:
                summary, description, files = parse_commit(body)
            except ValueError as exc:
                return 400, {"error": str(exc)}, {}
            if self.commit_delay:
                time.sleep(self.commit_delay)
            with self._lock:
                repo.branches[revision].update(files)
                oid = hashlib.sha1(f"{len(self.commits)}:{summary}".encode()).hexdigest()
                self.commits.append(
                    Commit(oid, repo_id, revision, summary, description, files, body)
                )
        url = f"{self.endpoint}/datasets/{repo_id}/commit/{oid}"
        return 200, {"commitOid": oid, "commitUrl": url}, {}


def parse_commit(body: bytes) -> tuple[str, str, dict[str, bytes]]:
    """Summary, description and files of an NDJSON commit body; ``ValueError`` if malformed."""
    lines = [line for line in body.split(b"\n") if line.strip()]
    if not lines:
        raise ValueError("empty commit")
    try:
        items = [json.loads(line) for line in lines]
    except json.JSONDecodeError as exc:
        raise ValueError(f"a line is not JSON: {exc}") from None
    header = items[0]
    if header.get("key") != "header" or "summary" not in header.get("value", {}):
        raise ValueError("the first line must be the header with a summary")
    files: dict[str, bytes] = {}
    for item in items[1:]:
        value = item.get("value", {})
        if item.get("key") != "file" or value.get("encoding") != "base64":
            raise ValueError(f"unsupported operation {item.get('key')!r}")
        path = value.get("path", "")
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"bad path {path!r}")
        try:
            files[path] = base64.b64decode(value["content"], validate=True)
        except (KeyError, binascii.Error) as exc:
            raise ValueError(f"bad content for {path}: {exc}") from None
    return header["value"]["summary"], header["value"].get("description", ""), files


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def _send(self, status: int, body: dict[str, object], headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _unauthorized(self) -> bool:
            presented = self.headers.get("Authorization")
            if hub._authorized(presented):
                return False
            self._send(401, {"error": f"Invalid credentials in Authorization: {presented}"}, {})
            return True

        def do_GET(self) -> None:
            path = unquote(self.path.split("?")[0])
            info = _INFO.match(path)
            if info:
                if self._unauthorized():
                    return
                status, body = hub._info(info["repo"], info["rev"])
                self._send(status, body, {})
                return
            resolve = _RESOLVE.match(path)
            if resolve:
                files = hub.files(resolve["repo"], resolve["rev"])
                data = files.get(resolve["path"])
                if data is None:
                    self._send(404, {"error": "Entry not found"}, {})
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self._send(404, {"error": f"no route {path}"}, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            path = unquote(self.path.split("?")[0])
            commit = _COMMIT.match(path)
            if not commit:
                self._send(404, {"error": f"no route {path}"}, {})
                return
            if self._unauthorized():
                return
            status, answer, headers = hub._commit(
                commit["repo"], commit["rev"], self.headers.get("Content-Type", ""), body
            )
            with hub._lock:
                hub.answers.append(status)
            if status == 0:
                self.close_connection = True  # stalled: no answer at all
                return
            self._send(status, answer, headers)

    return Handler


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.support.hub``: serve until SIGINT/SIGTERM, then list the files."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default="spate/readings", help="dataset repository to create")
    parser.add_argument("--token", default="", help="require this bearer token")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with HubServer(token=args.token) as hub:
        hub.create_repo(args.repo)
        print(f"hub test server at {hub.endpoint} (repository {args.repo})", flush=True)
        stop.wait()
        for commit in hub.commits:
            print(f"commit {commit.oid[:12]}: {commit.summary}")
        for path, data in sorted(hub.files(args.repo).items()):
            print(f"  {path} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
