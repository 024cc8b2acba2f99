"""The fault proxy itself, against a loopback echo server: each fault does what it says.

Timing checks are lower bounds only (an injected delay can only make things later on a
loaded machine); waits for something to happen are generous.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.delivery import wait_until
from tests.support.netfault import FaultProxy, kafka_request


class EchoServer(socketserver.ThreadingTCPServer):
    """Echoes every byte back; records what it received and how many peers hung up."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.received = bytearray()
        self.closed = 0
        self.lock = threading.Lock()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                try:
                    while data := sock.recv(65536):
                        with server.lock:
                            server.received.extend(data)
                        if not data.startswith(b"HOLD"):  # HOLD: a request left unanswered
                            sock.sendall(data)
                except OSError:
                    pass
                with server.lock:
                    server.closed += 1

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host!s}:{port}"


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(echo.address) as started:
        yield started


def connect(proxy: FaultProxy, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data.extend(chunk)
    return bytes(data)


def silent(sock: socket.socket, seconds: float = 0.5) -> bool:
    """True when nothing (no data, no close) arrives on ``sock`` for ``seconds``."""
    sock.settimeout(seconds)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(10)
    return False


def is_reset(sock: socket.socket) -> bool:
    """True when the peer has reset the connection (a read fails with ECONNRESET)."""
    try:
        sock.recv(1)
    except ConnectionResetError:
        return True
    return False


def test_forwards_both_ways_unchanged(proxy: FaultProxy, echo: EchoServer) -> None:
    payload = bytes(range(256)) * 1000
    with connect(proxy) as sock:
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
    assert bytes(echo.received) == payload
    assert proxy.stats.bytes_up == proxy.stats.bytes_down == len(payload)


def test_latency_delays_every_chunk_in_order(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        proxy.latency(0.4, jitter=0.1, direction="down")
        started = time.monotonic()
        for i in range(5):
            sock.sendall(b"%d;" % i)
        assert recv_exactly(sock, 10) == b"0;1;2;3;4;"
        assert time.monotonic() - started >= 0.3
        proxy.heal()
        sock.sendall(b"x")
        assert recv_exactly(sock, 1) == b"x"  # latency alone damages nothing


def test_bandwidth_limits_throughput(proxy: FaultProxy) -> None:
    payload = b"b" * 60_000
    proxy.bandwidth(60_000)
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
    # up and down are each limited to one second's worth.
    assert time.monotonic() - started >= 0.9


def test_blackhole_swallows_requests_and_heal_resets_the_damaged(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with connect(proxy) as before:
        before.sendall(b"a")
        assert recv_exactly(before, 1) == b"a"
        proxy.blackhole()
        before.sendall(b"lost")
        with connect(proxy) as during:  # accepted, never answered, never closed
            during.sendall(b"lost too")
            assert silent(before) and silent(during)
            wait_until(lambda: proxy.stats.swallowed >= 12, 10, "the requests swallowed")
            assert bytes(echo.received) == b"a"
            proxy.heal()
            assert is_reset(before) and is_reset(during)
    with connect(proxy) as after:
        after.sendall(b"ok")
        assert recv_exactly(after, 2) == b"ok"


def test_partition_swallows_replies_already_on_their_way(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with connect(proxy) as sock:
        proxy.latency(3.0, direction="down")
        sock.sendall(b"in flight")
        wait_until(lambda: bytes(echo.received) == b"in flight", 10, "the request delivered")
        proxy.partition()  # the echo is read from upstream during the partition: swallowed
        assert silent(sock, 1.0)
        wait_until(lambda: proxy.stats.swallowed >= 9, 10, "the reply swallowed")
        proxy.heal()
        assert is_reset(sock)


def test_half_open_drops_the_upstream_without_telling_the_client(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with connect(proxy) as stale:
        stale.sendall(b"a")
        assert recv_exactly(stale, 1) == b"a"
        proxy.half_open()
        wait_until(lambda: echo.closed == 1, 10, "the server to see the connection close")
        stale.sendall(b"into the void")
        assert silent(stale)
        with connect(proxy) as fresh:  # the server itself is fine
            fresh.sendall(b"b")
            assert recv_exactly(fresh, 1) == b"b"
        assert bytes(echo.received) == b"ab"


def test_reset_all_resets_open_connections(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        assert proxy.reset_all() == 1
        with pytest.raises(ConnectionResetError):
            sock.recv(1)


def test_cut_on_request_never_reaches_the_server(proxy: FaultProxy, echo: EchoServer) -> None:
    proxy.cut(lambda: lambda chunk: b"COMMIT" in chunk, when="request")
    with connect(proxy) as sock:
        sock.sendall(b"hello")
        assert recv_exactly(sock, 5) == b"hello"
        sock.sendall(b"COMMIT 1")
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    with connect(proxy) as sock:  # count=1: the next one goes through
        sock.sendall(b"COMMIT 2")
        assert recv_exactly(sock, 8) == b"COMMIT 2"
    assert bytes(echo.received) == b"helloCOMMIT 2"
    assert proxy.stats.cuts == 1


def test_cut_on_reply_lets_the_server_work_and_cuts_the_answer_mid_body(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    proxy.cut(when="reply", after=4, how="close")
    with connect(proxy) as sock:
        sock.sendall(b"0123456789")
        assert recv_exactly(sock, 10) == b"0123"  # then a plain close
    assert bytes(echo.received) == b"0123456789"
    proxy.cut(when="reply")
    with connect(proxy) as sock:
        sock.sendall(b"abc")
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    wait_until(lambda: bytes(echo.received).endswith(b"abc"), 10, "the request delivered")


def test_a_reply_cut_whose_connection_ends_before_the_reply_cuts_the_next_one(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    """A reply cut is spent only on a reply it cut: when the client closes the connection
    before the answer came, the next matching request's reply is cut instead (a test
    waiting for a number of cuts would otherwise wait forever)."""
    proxy.cut(when="reply")
    with connect(proxy) as sock:
        sock.sendall(b"HOLD")
        wait_until(lambda: bytes(echo.received) == b"HOLD", 10, "the request delivered")
    wait_until(lambda: proxy.open_connections == 0, 10, "the proxy to see the close")
    assert proxy.stats.cuts == 0
    with connect(proxy) as sock:
        sock.sendall(b"abc")
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    assert proxy.stats.cuts == 1


def test_a_refusing_upstream_resets_the_client(echo: EchoServer) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"  # bound, not listening: refused
        with FaultProxy(dead) as proxy:
            # The reset may beat the end of connect() itself.
            with pytest.raises(ConnectionResetError), connect(proxy) as sock:
                sock.recv(1)
            assert proxy.stats.upstream_refused == 1


def frame(api_key: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhi", api_key, 0, 7) + body
    return struct.pack(">i", len(payload)) + payload


def test_kafka_request_matcher_follows_frames_across_chunks() -> None:
    match = kafka_request(8)()
    stream = frame(12, b"heartbeat") + frame(8, b"commit") + frame(1, b"fetch" * 10)
    commit_end = len(frame(12, b"heartbeat")) + len(frame(8, b"commit"))
    assert not match(stream[:10])
    assert not match(stream[10 : commit_end - 1])
    assert match(stream[commit_end - 1 : commit_end + 3])
    assert not match(stream[commit_end + 3 :])
