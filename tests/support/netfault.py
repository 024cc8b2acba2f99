"""A TCP fault proxy for tests: put a misbehaving network between spate and a service.

:class:`FaultProxy` listens on a loopback port and forwards every connection to one
upstream address, byte for byte, from an asyncio loop on its own thread. A test switches
faults on and off at run time through the object; each takes effect at once on the open
connections and on new ones:

* :meth:`~FaultProxy.latency` — every chunk is delivered ``seconds`` (± ``jitter``) after
  it was read, in order, in one or both directions (throughput is not throttled by it);
* :meth:`~FaultProxy.bandwidth` — at most that many bytes per second in each direction;
* :meth:`~FaultProxy.blackhole` — connections are accepted and requests are swallowed;
  nothing is answered and nothing is closed (a replica that hangs);
* :meth:`~FaultProxy.partition` — every byte in both directions is swallowed, on open and
  new connections (a full network partition; loopback cannot drop a SYN, so a connect
  succeeds but nothing ever answers, which a client sees as a timeout);
* :meth:`~FaultProxy.half_open` — the open connections lose their upstream without the
  client being told: the server sees the connection close, the client's socket stays
  open and its writes vanish; new connections are forwarded normally;
* :meth:`~FaultProxy.reset_all` — every open connection is reset (RST) now;
* :meth:`~FaultProxy.cut` — a rule on requests: the next ``count`` client chunks that
  ``match`` are either reset before the server sees them (``when="request"``), or
  forwarded, and the connection is cut once the reply starts (``when="reply"``: the server
  did the work, the client never hears) — ``after`` bytes of the reply get through
  first, so a reply can be cut mid-body, by a reset or a plain close.

:meth:`~FaultProxy.heal` ends every fault. A connection that lost bytes to a fault cannot
carry on (its byte stream has a hole), so healing resets it; the client reconnects.

While the upstream refuses connections (a broker being restarted), a new connection is
reset at once, as the server's own refusal would be seen through a real proxy.

Nothing here knows a protocol, except :func:`kafka_request`, a ``match`` for
:meth:`~FaultProxy.cut` that frames a Kafka client's requests and picks one API. The
``kafka_fault_proxy`` fixture puts a proxy between a client and the real broker (its
``FAULT`` listener, advertised at the proxy's port by ``scripts/services.sh``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from tests.support.services import Service, probe_kafka, service_address

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
Direction = Literal["up", "down", "both"]
"""``up`` is client → upstream (requests), ``down`` upstream → client (replies)."""

_CHUNK = 65536
_MAX_KAFKA_FRAME = 64 << 20
_RESET = object()
_EOF = object()

Matcher = Callable[[bytes], bool]
"""Decides, per client chunk of one connection, whether a :meth:`FaultProxy.cut` applies."""
MatcherFactory = Callable[[], Matcher]


@dataclass
class _Cut:
    make_matcher: MatcherFactory | None
    when: Literal["request", "reply"]
    after: int
    how: Literal["reset", "close"]
    remaining: int


@dataclass
class ProxyStats:
    """Counters of one proxy over its life (read them through :attr:`FaultProxy.stats`)."""

    accepted: int = 0
    upstream_refused: int = 0
    resets: int = 0  # connections a fault of the proxy reset
    peer_resets: int = 0  # connections the client or the server broke (an error on a socket)
    cuts: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    swallowed: int = 0


@dataclass
class _Conn:
    ident: int
    client_reader: asyncio.StreamReader
    client_writer: asyncio.StreamWriter
    up_reader: asyncio.StreamReader | None = None
    up_writer: asyncio.StreamWriter | None = None
    damaged: bool = False
    half_open: bool = False
    closed: bool = False
    matchers: dict[int, Matcher] = field(default_factory=dict)
    reply_cut: _Cut | None = None
    reply_left: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def _abort(writer: asyncio.StreamWriter | None, *, reset: bool) -> None:
    """Close ``writer``'s socket at once; with ``reset`` the peer gets an RST, not a FIN."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if reset and sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    else:
        writer.close()


class FaultProxy:
    """A TCP proxy from ``host:port`` (0 = a free port) to ``upstream`` (``host:port``)."""

    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        up_host, _, up_port = upstream.rpartition(":")
        self.upstream = (up_host or "127.0.0.1", int(up_port))
        self.host = host
        self.port = port
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._delay = {"up": 0.0, "down": 0.0}
        self._jitter = {"up": 0.0, "down": 0.0}
        self._rate: float | None = None
        self._swallow = {"up": False, "down": False}
        self._cuts: list[_Cut] = []
        self._conns: dict[int, _Conn] = {}
        self._next_id = 0
        self._rng = random.Random(0)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy")
        self._thread.daemon = True
        self._server: asyncio.Server | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"

    def start(self) -> FaultProxy:
        """Listen; raises ``OSError`` (the port is taken) with nothing left running."""
        self._thread.start()
        try:
            self._run(self._listen())
        except BaseException:
            self.stop()
            raise
        logger.info("fault proxy %s -> %s:%d", self.address, *self.upstream)
        return self

    def stop(self) -> None:
        """Stop listening and reset every connection; the proxy cannot be started again."""
        if not self._thread.is_alive():
            return
        self._run(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns.values()):
            self._close(conn, reset=True)
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------ faults (any thread)

    def latency(self, seconds: float, jitter: float = 0.0, direction: Direction = "both") -> None:
        """Deliver each chunk ``seconds`` ± ``jitter`` (uniform, never below 0) after it
        was read; order is kept."""
        with self._lock:
            for d in self._directions(direction):
                self._delay[d], self._jitter[d] = seconds, jitter

    def bandwidth(self, bytes_per_second: float | None) -> None:
        """Limit each direction of each connection to ``bytes_per_second`` (None: no limit)."""
        with self._lock:
            self._rate = bytes_per_second

    def blackhole(self) -> None:
        """Swallow every request; answer nothing, close nothing."""
        with self._lock:
            self._swallow["up"] = True

    def partition(self) -> None:
        """Swallow every byte in both directions, on open and new connections."""
        with self._lock:
            self._swallow["up"] = self._swallow["down"] = True

    def half_open(self) -> None:
        """Close the open connections' upstream side only; their clients are not told."""
        self._run(self._half_open())

    def reset_all(self) -> int:
        """Reset every open connection; returns how many there were."""
        return self._run(self._reset_all())

    def cut(
        self,
        match: MatcherFactory | None = None,
        *,
        when: Literal["request", "reply"] = "reply",
        after: int = 0,
        how: Literal["reset", "close"] = "reset",
        count: int = 1,
    ) -> None:
        """Cut the next ``count`` matching requests (any client chunk when ``match`` is None;
        otherwise ``match()`` makes one matcher per connection, fed every client chunk).

        ``when="request"``: the matching chunk is dropped and the connection reset.
        ``when="reply"``: the chunk is forwarded; once the reply starts, ``after`` bytes of
        it pass and the connection is reset (``how="reset"``) or closed (``"close"``).
        """
        with self._lock:
            self._cuts.append(_Cut(match, when, after, how, count))

    def heal(self) -> None:
        """End every fault; connections that lost bytes to one are reset."""
        with self._lock:
            self._delay = {"up": 0.0, "down": 0.0}
            self._jitter = {"up": 0.0, "down": 0.0}
            self._rate = None
            self._swallow = {"up": False, "down": False}
            self._cuts.clear()
        self._run(self._reset_damaged())

    @property
    def open_connections(self) -> int:
        with self._lock:
            return sum(1 for c in self._conns.values() if not c.closed)

    @staticmethod
    def _directions(direction: Direction) -> tuple[Literal["up", "down"], ...]:
        return ("up", "down") if direction == "both" else (direction,)

    # ------------------------------------------------------------------ loop side

    async def _half_open(self) -> None:
        for conn in list(self._conns.values()):
            if conn.closed or conn.up_writer is None:
                continue
            conn.half_open = conn.damaged = True
            _abort(conn.up_writer, reset=False)

    async def _reset_all(self) -> int:
        conns = [c for c in self._conns.values() if not c.closed]
        for conn in conns:
            self._close(conn, reset=True)
        return len(conns)

    async def _reset_damaged(self) -> None:
        for conn in list(self._conns.values()):
            if conn.damaged and not conn.closed:
                self._close(conn, reset=True)

    def _close(self, conn: _Conn, *, reset: bool, by_peer: bool = False) -> None:
        if conn.closed:
            return
        conn.closed = True
        with self._lock:
            if conn.reply_cut is not None:
                # The connection ended before the reply came (the client gave up on it or
                # closed it): nothing was cut, so the next matching request is.
                conn.reply_cut.remaining += 1
                conn.reply_cut = None
                logger.info("connection %d closed before the reply: cut re-armed", conn.ident)
        if reset and by_peer:
            self.stats.peer_resets += 1
        elif reset:
            self.stats.resets += 1
        _abort(conn.client_writer, reset=reset)
        _abort(conn.up_writer, reset=reset)
        current = asyncio.current_task()
        for task in conn.tasks:
            if task is not current:
                task.cancel()
        self._conns.pop(conn.ident, None)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            self._next_id += 1
            conn = _Conn(self._next_id, reader, writer)
            self._conns[conn.ident] = conn
            self.stats.accepted += 1
            cut_off = self._swallow["up"]
        if cut_off:
            # A partitioned or blackholed server is never reached: hold the client.
            conn.damaged = True
        else:
            try:
                conn.up_reader, conn.up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                self.stats.upstream_refused += 1
                self._close(conn, reset=True)
                return
        up_queue: asyncio.Queue[Any] = asyncio.Queue()
        down_queue: asyncio.Queue[Any] = asyncio.Queue()
        conn.tasks = [
            asyncio.create_task(self._read(conn, "up", up_queue)),
            asyncio.create_task(self._write(conn, "up", up_queue)),
            asyncio.create_task(self._read(conn, "down", down_queue)),
            asyncio.create_task(self._write(conn, "down", down_queue)),
        ]

    async def _read(self, conn: _Conn, d: Literal["up", "down"], queue: asyncio.Queue[Any]) -> None:
        source = conn.client_reader if d == "up" else conn.up_reader
        if source is None:  # held without an upstream: nothing comes down
            if d == "up":
                await self._swallow_all(conn, conn.client_reader)
            return
        try:
            while True:
                data = await source.read(_CHUNK)
                if not data:
                    if not (conn.half_open and d == "down"):  # the client is not told
                        await queue.put(_EOF)
                    return
                for item in self._route(conn, d, data):
                    await queue.put(item)
        except (OSError, asyncio.IncompleteReadError):
            if not conn.half_open or d == "up":
                self._close(conn, reset=True, by_peer=True)

    async def _swallow_all(self, conn: _Conn, source: asyncio.StreamReader) -> None:
        try:
            while data := await source.read(_CHUNK):
                with self._lock:
                    self.stats.swallowed += len(data)
        except OSError:
            pass
        self._close(conn, reset=False)

    def _route(self, conn: _Conn, d: Literal["up", "down"], data: bytes) -> list[Any]:
        """What the writer of direction ``d`` gets for ``data``: timed chunks and markers."""
        with self._lock:
            if self._swallowed_locked(conn, d, data):
                return []
            due = time.monotonic() + max(
                0.0, self._delay[d] + self._rng.uniform(-self._jitter[d], self._jitter[d])
            )
            if d == "up":
                return self._route_request(conn, data, due)
            if conn.reply_cut is None:
                return [(due, data)]
            cut, left = conn.reply_cut, conn.reply_left
            if len(data) < left:
                conn.reply_left -= len(data)
                return [(due, data)]
            conn.reply_cut = None
            self.stats.cuts += 1
            logger.info("connection %d: reply cut", conn.ident)
            head = [(due, data[:left])] if left else []
            return [*head, (_RESET if cut.how == "reset" else _EOF)]

    def _swallowed(self, conn: _Conn, d: Literal["up", "down"], data: bytes) -> bool:
        with self._lock:
            return self._swallowed_locked(conn, d, data)

    def _swallowed_locked(self, conn: _Conn, d: Literal["up", "down"], data: bytes) -> bool:
        """Whether a fault eats ``data`` (the connection is then damaged); lock held."""
        if conn.half_open and d == "down":
            return True
        if self._swallow[d] or conn.half_open:
            conn.damaged = True
            self.stats.swallowed += len(data)
            return True
        return False

    def _route_request(self, conn: _Conn, data: bytes, due: float) -> list[Any]:
        for index, cut in enumerate(self._cuts):
            if cut.remaining <= 0:
                continue
            if cut.make_matcher is not None:
                matcher = conn.matchers.get(index)
                if matcher is None:
                    matcher = conn.matchers[index] = cut.make_matcher()
                if not matcher(data):
                    continue
            cut.remaining -= 1
            if cut.when == "request":
                self.stats.cuts += 1
                logger.info("connection %d: request cut", conn.ident)
                return [_RESET]
            conn.reply_cut, conn.reply_left = cut, cut.after
            logger.info("connection %d: request forwarded, its reply to be cut", conn.ident)
            break
        return [(due, data)]

    async def _write(
        self, conn: _Conn, d: Literal["up", "down"], queue: asyncio.Queue[Any]
    ) -> None:
        target = conn.up_writer if d == "up" else conn.client_writer
        if target is None:
            return
        try:
            while True:
                item = await queue.get()
                if item is _RESET:
                    self._close(conn, reset=True)
                    return
                if item is _EOF:
                    # One side finished: flush it to the other and close the connection.
                    await target.drain()
                    self._close(conn, reset=False)
                    return
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self._swallowed(conn, d, data):  # a fault began while it was delayed
                    continue
                with self._lock:
                    if d == "up":
                        self.stats.bytes_up += len(data)
                    else:
                        self.stats.bytes_down += len(data)
                await self._send(target, data)
        except (OSError, RuntimeError):
            self._close(conn, reset=True, by_peer=True)

    async def _send(self, target: asyncio.StreamWriter, data: bytes) -> None:
        with self._lock:
            rate = self._rate
        if not rate:
            target.write(data)
            await target.drain()
            return
        step = max(1, int(rate / 20))
        for start in range(0, len(data), step):
            piece = data[start : start + step]
            target.write(piece)
            await target.drain()
            await asyncio.sleep(len(piece) / rate)


def kafka_request(api_key: int) -> MatcherFactory:
    """A :meth:`FaultProxy.cut` matcher for Kafka: true for a client chunk that completes a
    request of ``api_key`` (8 = OffsetCommit, 12 = Heartbeat, 1 = Fetch, ...).

    Kafka requests are framed as a 4-byte big-endian size, then the header (API key first);
    one matcher per connection follows the frames across chunks.
    """

    def make() -> Matcher:
        buffer = bytearray()

        def match(chunk: bytes) -> bool:
            buffer.extend(chunk)
            found = False
            while len(buffer) >= 6:
                size = struct.unpack_from(">i", buffer)[0]
                if not 2 <= size <= _MAX_KAFKA_FRAME:  # joined mid-frame: wait for a new one
                    buffer.clear()
                    break
                if len(buffer) < 4 + size:
                    break
                found = found or struct.unpack_from(">h", buffer, 4)[0] == api_key
                del buffer[: 4 + size]
            return found

        return match

    return make


def peer_sockets(pid: int) -> Counter[int]:
    """The TCP sockets a Linux process holds open, counted by their peer's port.

    A socket's descriptor names its inode (``socket:[N]``), and the process's network
    namespace lists every TCP socket with its inode and addresses (``/proc/PID/net/tcp``).
    """
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    peers: Counter[int] = Counter()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:  # rem_address is HEXIP:HEXPORT
                peers[int(fields[2].rpartition(":")[2], 16)] += 1
    return peers


# ---------------------------------------------------------------- Kafka through a proxy

KAFKA_FAULT = Service("kafka", "SPATE_KAFKA_FAULT_BOOTSTRAP")
KAFKA_FAULT_UPSTREAM = Service("kafka", "SPATE_KAFKA_FAULT_UPSTREAM")


@pytest.fixture
def kafka_fault_proxy(kafka_bootstrap: str) -> Iterator[FaultProxy]:
    """A fault proxy on the port the broker's ``FAULT`` listener advertises, forwarding to
    that listener: a client bootstrapped at ``proxy.address`` reaches the broker (for
    metadata, fetches, the group coordinator) only through the proxy. Healed and stopped
    after the test. Clients at ``kafka_bootstrap`` are not affected by its faults."""
    bootstrap = service_address(KAFKA_FAULT)
    upstream = service_address(KAFKA_FAULT_UPSTREAM)
    host, _, port = bootstrap.rpartition(":")
    proxy = FaultProxy(upstream, host=host, port=int(port)).start()
    try:
        probe_kafka(proxy.address)
        yield proxy
    finally:
        proxy.stop()
