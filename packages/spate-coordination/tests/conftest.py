"""Fixtures of spate-coordination's tests: a private nats-server per test that needs one.

Fault tests restart or pause the server, so they cannot share the one
``scripts/services.sh`` runs: :func:`private_nats` starts ``nats-server -js`` on a free
loopback port with its own store directory and always kills it at teardown.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _nats_server_binary() -> str:
    found = shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server") else None
    )
    if found is None:
        pytest.fail("nats-server is not installed (apt-get install -y nats-server)", pytrace=False)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class NatsServer:
    """A nats-server with JetStream on 127.0.0.1, owned by one test."""

    def __init__(self, workdir: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.extra_args = extra_args
        self.binary = _nats_server_binary()
        self.port = free_port()
        self.store_dir = workdir / "jetstream"
        self.log_path = workdir / "nats-server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Start (or restart) the server on the same port and store; wait for JetStream."""
        assert self.process is None or self.process.poll() is not None
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-js",
                "-sd",
                str(self.store_dir),
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    if b'"jetstream":true' in sock.makefile("rb").readline(65536):
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"nats-server on {self.url} did not start:\n{tail}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop cleanly (SIGTERM: JetStream flushes its store) and wait for the exit."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[NatsServer]:
    """A private nats-server for this test only; killed at teardown whatever happens."""
    server = NatsServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.kill()


@pytest.fixture
def nats_servers(tmp_path: Path) -> Iterator[Callable[..., NatsServer]]:
    """Start extra private servers: ``nats_servers(name, *extra_args)``; all killed after."""
    started: list[NatsServer] = []

    def start(name: str, *extra_args: str) -> NatsServer:
        workdir = tmp_path / name
        workdir.mkdir()
        server = NatsServer(workdir, tuple(extra_args))
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            with contextlib.suppress(Exception):
                server.kill()


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on (for unreachable-endpoint tests)."""
    return free_port()
