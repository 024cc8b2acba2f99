"""``HttpPollSource``: a JSON API polled on a tick, deduplicated by key (B74-B77).

Owns the source's thread and its hand-over to the pipeline thread. A ticker thread
runs one tick every ``interval`` through :class:`~spate_http._fetch.Fetcher` and puts
its pages on a bounded queue (a paused or slow pipeline holds the ticker back instead
of piling responses up). ``poll`` — on the pipeline thread — takes
pages off the queue, drops records whose key is in flight or delivered within
``dedupe_window`` (counted as ``duplicate``), gives the rest the next offsets of the
source's one lane and hands them out as one batch per page. ``commit`` moves delivered
keys into the checkpoint and persists it (:class:`~spate_http._state.Checkpoint`), so
a restart neither repeats what was delivered nor loses what was not (B76).

Record errors (:class:`~spate_http._fetch.Problem`) follow ``on_error``: under
``skip`` they are counted in ``spate_source_dropped_total`` with their reason and
logged; under ``fail`` ``poll`` raises a fatal ``SourceError`` (B75).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Collection, Mapping, Sequence

import httpx
from spate import Clock
from spate.errors import ErrorClass, SourceError
from spate.metrics import CounterSeries, Meter, names
from spate.records import Lane, PayloadBatch
from spate.source import SourceEvents

from spate_http._extract import Extractor, KeyMaker
from spate_http._fetch import Fetcher, Item, Page, Problem, RequestCounters, TickEnd
from spate_http._query import install_httpx_filter, mask_urls, register_query_secrets
from spate_http._state import Checkpoint
from spate_http.config import HttpPollConfig

logger = logging.getLogger(__name__)

_COMPONENT_TYPE = "source"
_QUEUE_ITEMS = 64


class _Failed:
    """The ticker thread died: ``poll`` fails the run with this reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class HttpPollSource:
    """Implements ``Source`` over an HTTP API polled every ``interval``."""

    def __init__(
        self,
        config: HttpPollConfig,
        *,
        extractor: Extractor,
        keys: KeyMaker | None,
        meter: Meter,
        clock: Clock,
        component: str = "source",
    ) -> None:
        self._cfg = config
        register_query_secrets(config.url, config.params, config.public_params)
        install_httpx_filter(config.public_params)
        self._extractor = extractor
        self._keys = keys
        self._clock = clock
        self._component = component
        self.lane = Lane(config.stream, 0)
        self.checkpoint = Checkpoint(config.state_path, config.window)
        self._meter = meter
        self._dropped: dict[str, CounterSeries] = {}
        self._counters = RequestCounters(
            ok=self._requests("ok"),
            retried=self._requests("retried"),
            failed=self._requests("failed"),
        )
        self._queue: queue.Queue[Item | _Failed] = queue.Queue(maxsize=_QUEUE_ITEMS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: httpx.Client | None = None
        self._events: SourceEvents | None = None
        self._paused = False
        self._ticks_done = 0
        self._drained = False

    # -- Source ---------------------------------------------------------------------

    def start(self, events: SourceEvents) -> None:
        """Load the checkpoint, start the ticker thread and take the one lane."""
        self.checkpoint.load()
        self._events = events
        self._client = httpx.Client(
            headers={name: value.reveal() for name, value in self._cfg.headers.items()},
            timeout=self._cfg.timeout,
            follow_redirects=True,
        )
        fetcher = Fetcher(
            self._cfg, self._client, self._extractor, self._keys, self._counters, self._stop
        )
        self._thread = threading.Thread(
            target=self._run,
            args=(fetcher, self.checkpoint.tick),
            name="spate-http-poll",
            daemon=True,
        )
        self._thread.start()
        events.assigned([self.lane])
        logger.info("polling %s every %.3gs", fetcher.where, self._cfg.interval)

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        """At most one batch (one page's new records); waits up to ``timeout`` for one."""
        if self._events is None:
            raise RuntimeError("poll before start")
        if self._paused or self._drained:
            return ()
        deadline = self._clock.monotonic() + timeout
        while True:
            remaining = deadline - self._clock.monotonic()
            try:
                if remaining > 0:
                    item = self._queue.get(timeout=remaining)
                else:
                    item = self._queue.get_nowait()
            except queue.Empty:
                return ()
            if isinstance(item, Page):
                batch = self._batch(item)
                if batch is not None:
                    return [batch]
            elif isinstance(item, Problem):
                self._problem(item)
            elif isinstance(item, TickEnd):
                self._tick_end(item)
                if self._drained:
                    return ()
            else:
                raise SourceError(item.reason, ErrorClass.FATAL)

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        """Move the keys before ``offsets[lane]`` into the checkpoint and write the state
        file when it advanced (B76); called on the pipeline thread, blocks on one fsync."""
        upto = offsets.get(self.lane)
        if upto is not None:
            self.checkpoint.commit(upto, self._clock.time())

    def pause(self, lanes: Collection[Lane]) -> None:
        if self.lane in lanes:
            self._paused = True

    def resume(self, lanes: Collection[Lane]) -> None:
        if self.lane in lanes:
            self._paused = False

    def close(self) -> None:
        """Stop the ticker (waiting out a request in flight) and close the client."""
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                self._drain_queue()  # unblock a put
                self._thread.join(timeout=0.05)
            self._thread = None
        if self._client is not None:
            self._client.close()
            self._client = None
        self.checkpoint.release()
        self._events = None

    # -- pipeline thread -----------------------------------------------------------

    def _batch(self, page: Page) -> PayloadBatch | None:
        checkpoint = self.checkpoint
        checkpoint.tick = max(checkpoint.tick, page.tick)
        offsets: list[int] = []
        texts: list[bytes] = []
        keys: list[bytes | None] = []
        duplicates = 0
        for row in page.rows:
            if row.key is not None and checkpoint.is_duplicate(row.key, page.tick, page.at):
                duplicates += 1
                continue
            offsets.append(checkpoint.handed_out(row.key, page.tick, page.at))
            texts.append(row.payload)
            keys.append(row.key.encode() if row.key is not None else None)
        if duplicates:
            self._drop("duplicate").inc(duplicates)
        if not offsets:
            return None
        buffer = memoryview(b"".join(texts))
        views: list[memoryview] = []
        position = 0
        for text in texts:
            views.append(buffer[position : position + len(text)])
            position += len(text)
        stamp = int(page.at * 1000)
        return PayloadBatch(
            lane=self.lane,
            offsets=offsets,
            payloads=views,
            keys=keys,
            timestamps=[stamp] * len(views),
            next_offset=checkpoint.next_offset,
        )

    def _problem(self, problem: Problem) -> None:
        if self._cfg.on_error == "fail":
            raise SourceError(
                f"{problem.detail} ({problem.reason}; on_error is fail)", ErrorClass.FATAL
            )
        self._drop(problem.reason).inc()
        logger.warning("skipped (%s) in tick %d: %s", problem.reason, problem.tick, problem.detail)

    def _tick_end(self, end: TickEnd) -> None:
        self.checkpoint.tick = max(self.checkpoint.tick, end.tick)
        self._ticks_done += 1
        if self._cfg.max_ticks and self._ticks_done >= self._cfg.max_ticks:
            self._drained = True
            assert self._events is not None
            self._events.drained()

    def _drop(self, reason: str) -> CounterSeries:
        series = self._dropped.get(reason)
        if series is None:
            series = self._meter.counter(
                names.SOURCE_DROPPED,
                component=self._component,
                component_type=_COMPONENT_TYPE,
                reason=reason,
            )
            self._dropped[reason] = series
        return series

    def _requests(self, outcome: str) -> CounterSeries:
        return self._meter.counter(
            names.SOURCE_REQUESTS,
            component=self._component,
            component_type=_COMPONENT_TYPE,
            outcome=outcome,
        )

    def _drain_queue(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    # -- ticker thread -------------------------------------------------------------

    def _run(self, fetcher: Fetcher, last_tick: int) -> None:
        """Tick every ``interval`` until stopped or ``max_ticks`` ticks are taken."""
        try:
            number = last_tick
            taken = 0
            while not self._stop.is_set():
                started = self._clock.monotonic()
                number += 1
                for item in fetcher.tick(number, self._clock.time()):
                    if not self._put(item):
                        return
                taken += 1
                if self._cfg.max_ticks and taken >= self._cfg.max_ticks:
                    return
                wait = started + self._cfg.interval - self._clock.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    return
        except Exception as exc:  # the top of a thread: fail the run through poll()
            logger.exception("the http_poll ticker failed")
            detail = mask_urls(repr(exc), self._cfg.public_params)
            self._put(_Failed(f"the http_poll ticker failed: {detail}"))

    def _put(self, item: Item | _Failed) -> bool:
        """Queue ``item``, waiting while the queue is full; False once stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False
