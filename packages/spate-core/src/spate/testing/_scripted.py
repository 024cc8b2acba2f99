"""A scripted sink connector for the sink pool: test the pool (and connector code) offline.

``scripted_pool(...)`` returns ``(pool, endpoints)``: a real :class:`~spate.sink.SinkPool`
whose endpoints are in memory. Each write attempt on an endpoint takes that endpoint's
next scripted outcome (then ``ok`` once the script is used up):

* ``"ok"`` — written: the rows are kept in :attr:`ScriptedEndpoints.written`;
* ``"retryable"`` — ``SinkError`` RETRYABLE (a network error, an overloaded server);
* ``"fatal"`` — ``SinkError`` FATAL (retrying cannot help);
* ``"refused"`` — :class:`~spate.sink.RowsFailed`: rows the destination refused on their
  own under ``on_record_error: fail``, the batch failed for good (B322);
* ``delay(seconds)`` (from :mod:`spate.testing`) — the write takes ``seconds`` on the
  pool's clock (a manual clock just moves on), then succeeds;
* :meth:`ScriptedEndpoints.down` — while an endpoint is down its probe fails and every
  write raises RETRYABLE ("connection refused"), whatever the script says.

Every attempt is recorded (:attr:`ScriptedEndpoints.attempts`) with its endpoint, shard,
sequence number, dedup token and outcome, so tests can check retries, tokens (B9),
failover (B11) and backoff (B12). ``reject(predicate)`` makes the row buffer refuse
matching rows with ``SinkError(RECORD)`` at append time (B28). With
``scripted_pool(takes_rows=True)`` the endpoints also check a source batch's rows at once
(``prepare_rows``, B95), refusing the same rows, so the pool takes rows in blocks.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spate._clock import Clock, ManualClock
from spate.errors import ErrorClass, SinkError
from spate.flow._contract import ByteBudget
from spate.metrics._meter import Meter
from spate.sink._pool import SinkPool
from spate.sink._writer import ListRowBuffer, RowsFailed, WriteBatch
from spate.sink.config import PoolConfig, ShardConfig


@dataclass(frozen=True, slots=True)
class WriteAttempt:
    """One write attempt as an endpoint saw it."""

    endpoint: str
    shard: int
    seq: int
    token: str
    attempt: int
    rows: tuple[object, ...]
    outcome: str
    at: float
    """The pool clock's monotonic time when the attempt started."""


class _UnboundedBudget:
    def acquire(self, nbytes: int) -> None:
        pass

    def release(self, nbytes: int) -> None:
        pass


class _Block:
    """Rows :meth:`ScriptedEndpoints.prepare_rows` checked (a ``RowBlock``)."""

    def __init__(self, rows: list[object]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, positions: Sequence[int]) -> _Block:
        return _Block([self.rows[p] for p in positions])

    def slice(self, start: int, stop: int) -> _Block:
        return _Block(self.rows[start:stop])


class _BlockBuffer(ListRowBuffer):
    """A list buffer that also appends checked blocks."""

    __slots__ = ()

    def append_rows(self, block: _Block) -> int:
        self.rows.extend(block.rows)
        return sum(map(self._estimate, block.rows))


class ScriptedEndpoints:
    """The test's handle: script outcomes per endpoint, read what was attempted/written."""

    def __init__(self, clock: Clock, *, takes_rows: bool = False) -> None:
        self.clock = clock
        self.takes_rows = takes_rows
        """Whether the pool hands rows in blocks (:meth:`prepare_rows`, B95)."""
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[tuple[str, float]]] = defaultdict(deque)
        self._down: set[str] = set()
        self._reject: Callable[[object], bool] | None = None
        self.attempts: list[WriteAttempt] = []
        self.written: list[WriteAttempt] = []
        self.probes: list[str] = []
        self.closed: list[str] = []

    def script(self, endpoint: str, *outcomes: object, times: int = 1) -> ScriptedEndpoints:
        """Queue ``outcomes`` (each repeated ``times``) for the next attempts on ``endpoint``.

        An outcome is ``"ok"``, ``"retryable"``, ``"fatal"``, ``"refused"`` or
        ``delay(seconds)``.
        """
        parsed = [_parse(o) for o in outcomes]
        with self._lock:
            for item in parsed:
                self._scripts[endpoint].extend([item] * times)
        return self

    def down(self, endpoint: str, is_down: bool = True) -> ScriptedEndpoints:
        """Take ``endpoint`` down (probe and writes fail, retryable) or bring it back."""
        with self._lock:
            if is_down:
                self._down.add(endpoint)
            else:
                self._down.discard(endpoint)
        return self

    def reject(self, predicate: Callable[[object], bool] | None) -> ScriptedEndpoints:
        """Rows matching ``predicate`` cannot be encoded (``SinkError`` RECORD on append)."""
        self._reject = predicate
        return self

    def rows(self) -> list[object]:
        """Every row of every successful write, in write order."""
        with self._lock:
            return [row for w in self.written for row in w.rows]

    def attempts_on(self, endpoint: str) -> list[WriteAttempt]:
        with self._lock:
            return [a for a in self.attempts if a.endpoint == endpoint]

    # -- connector side --

    def new_buffer(self, shard: int) -> ListRowBuffer:
        return _BlockBuffer(self._check)

    def prepare_rows(self, rows: list[object]) -> tuple[_Block, list[tuple[int, Exception]]]:
        """The rows :meth:`reject` does not refuse, and the refused ones (B95)."""
        kept: list[object] = []
        refused: list[tuple[int, Exception]] = []
        for position, row in enumerate(rows):
            try:
                kept.append(self._check(row))
            except SinkError as exc:
                refused.append((position, exc))
        return _Block(kept), refused

    def _check(self, row: object) -> object:
        reject = self._reject
        if reject is not None and reject(row):
            raise SinkError(f"cannot encode {row!r}", ErrorClass.RECORD)
        return row

    def open_writer(self, shard: int, replica: int, endpoint: str) -> ScriptedWriter:
        return ScriptedWriter(self, endpoint)

    def _next(self, endpoint: str) -> tuple[str, float]:
        with self._lock:
            if endpoint in self._down:
                return ("down", 0.0)
            script = self._scripts[endpoint]
            return script.popleft() if script else ("ok", 0.0)

    def _rows(self, buffer: object) -> tuple[object, ...]:
        """The rows a write attempt records from its batch's buffer."""
        return tuple(buffer.rows) if isinstance(buffer, ListRowBuffer) else ()

    def _record(self, endpoint: str, batch: WriteBatch, outcome: str, at: float) -> None:
        rows = self._rows(batch.buffer)
        attempt = WriteAttempt(
            endpoint, batch.shard, batch.seq, batch.token, batch.attempt, rows, outcome, at
        )
        with self._lock:
            self.attempts.append(attempt)
            if outcome == "ok":
                self.written.append(attempt)


class ScriptedWriter:
    """A :class:`~spate.sink.ShardWriter` whose outcomes come from the script."""

    def __init__(self, endpoints: ScriptedEndpoints, endpoint: str) -> None:
        self._endpoints = endpoints
        self.endpoint = endpoint

    def probe(self) -> None:
        with self._endpoints._lock:
            self._endpoints.probes.append(self.endpoint)
            down = self.endpoint in self._endpoints._down
        if down:
            raise SinkError(f"{self.endpoint}: connection refused", ErrorClass.RETRYABLE)

    def write(self, batch: WriteBatch) -> None:
        at = self._endpoints.clock.monotonic()
        kind, seconds = self._endpoints._next(self.endpoint)
        if kind == "delay":
            self._endpoints.clock.sleep(seconds)
            kind = "ok"
        self._endpoints._record(self.endpoint, batch, kind, at)
        if kind == "ok":
            return
        if kind == "fatal":
            raise SinkError(f"{self.endpoint}: scripted fatal error", ErrorClass.FATAL)
        if kind == "refused":
            raise RowsFailed(f"{self.endpoint}: scripted refusal of a row")
        if kind == "down":
            raise SinkError(f"{self.endpoint}: connection refused", ErrorClass.RETRYABLE)
        raise SinkError(f"{self.endpoint}: scripted retryable error", ErrorClass.RETRYABLE)

    def close(self) -> None:
        with self._endpoints._lock:
            self._endpoints.closed.append(self.endpoint)


def _parse(outcome: object) -> tuple[str, float]:
    kind = getattr(outcome, "kind", outcome)
    seconds = float(getattr(outcome, "delay", 0.0))
    if kind not in ("ok", "retryable", "fatal", "refused", "delay"):
        raise ValueError(
            "a scripted outcome is 'ok', 'retryable', 'fatal', 'refused' or delay(s), "
            f"got {outcome!r}"
        )
    return str(kind), seconds


def scripted_pool(
    name: str = "sink",
    *,
    shards: Sequence[Sequence[str] | ShardConfig] | int = 1,
    config: PoolConfig | None = None,
    clock: Clock | None = None,
    meter: Meter | None = None,
    budget: ByteBudget | None = None,
    pipeline: str = "test",
    run_nonce: str = "run1",
    io_threads: int = 0,
    rng: Callable[[], float] | None = None,
    takes_rows: bool = False,
) -> tuple[SinkPool, ScriptedEndpoints]:
    """A sink pool over scripted in-memory endpoints, and the handle that scripts them.

    ``shards`` is a shard count (one replica each, named ``s0``, ``s1``, …), a list of
    replica lists, or :class:`~spate.sink.ShardConfig` objects. By default the pool
    writes inline (``io_threads=0``) on a :class:`~spate.testing.ManualClock`, with no
    jitter, so every timing in a test is exact. ``takes_rows``: the pool takes a source
    batch's rows at once (B95).
    """
    clock = clock if clock is not None else ManualClock()
    if isinstance(shards, int):
        configs = [ShardConfig(replicas=(f"s{i}",)) for i in range(shards)]
    else:
        configs = [
            s if isinstance(s, ShardConfig) else ShardConfig(replicas=tuple(s)) for s in shards
        ]
    endpoints = ScriptedEndpoints(clock, takes_rows=takes_rows)
    pool = SinkPool(
        name,
        endpoints,
        shards=configs,
        pipeline=pipeline,
        run_nonce=run_nonce,
        meter=meter if meter is not None else Meter(pipeline),
        clock=clock,
        budget=budget if budget is not None else _UnboundedBudget(),
        io_threads=io_threads,
        config=config,
        component_type="scripted",
        rng=rng if rng is not None else (lambda: 0.0),
    )
    return pool, endpoints
