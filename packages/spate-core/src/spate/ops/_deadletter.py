"""The dead-letter sink: records that cannot be processed, written with their error (B71-B73).

A record error under the ``dead_letter`` policy — a payload the deserializer cannot
decode, an operator exception (``try_map(policy="dead_letter")`` or a chain-level
``ctx.chain(on_error="dead_letter")``), a row a sink cannot encode (``on_record_error:
dead_letter``) — is offered to the dead-letter sink together with the ack of its source
batch. That sink is an ordinary sink: it retains the ack when it takes the record and
releases it once the record is durably written, so the batch (and its offsets) is
delivered only when its good rows *and* its dead letters are written (B71). A full or
down dead-letter sink answers ``REJECTED`` and the chain stalls at the record like for
any sink (B7, B8).

What is offered depends on the sink (``DeadLetterSettings.format``):

* ``kafka`` — a ``(key, value, headers)`` triple: the original key and payload bytes
  unchanged, the error in ``spate.error.*`` headers (:data:`HEADER_NAMES`);
* ``row`` — a mapping with ``key`` and ``payload`` (the original bytes as text, invalid
  UTF-8 replaced) and the error fields as columns (:data:`ROW_COLUMNS`), for a table or
  a file sink.

Limits (B72): ``max_consecutive`` dead-lettered records in a row of one lane, or more
than ``max_ratio`` of the records seen over the last ``window`` records, fail the
pipeline with one line, so a broken deployment does not shovel a whole topic away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from spate.checkpoint._ack import AckToken
from spate.config.models import DeadLetterSettings
from spate.errors import FatalError
from spate.metrics._meter import CounterSeries, Meter
from spate.metrics.names import DLQ_LIMIT_BREACHES, DLQ_RECORDS
from spate.records import Lane, PayloadBatch
from spate.sink._contract import Offer, Sink

logger = logging.getLogger(__name__)

DEAD_LETTER_COMPONENT = "dead_letter"
"""The component name of the dead-letter sink (metrics, logs, the runtime's sink map)."""

_LABELS = {"component": DEAD_LETTER_COMPONENT, "component_type": "dead_letter"}

HEADER_PREFIX = "spate.error."
HEADER_NAMES: tuple[str, ...] = tuple(
    HEADER_PREFIX + name
    for name in (
        "stage",
        "reason",
        "message",
        "source.topic",
        "source.partition",
        "source.offset",
        "source.timestamp",
        "pipeline",
    )
)
"""The Kafka headers of a dead-lettered record, in the order they are written."""

ROW_COLUMNS: tuple[str, ...] = (
    "key",
    "payload",
    "error_stage",
    "error_reason",
    "error_message",
    "source_topic",
    "source_partition",
    "source_offset",
    "source_timestamp",
    "pipeline",
)
"""The fields of a dead-letter row (``format: row``), e.g. the columns of a table."""

MAX_MESSAGE_CHARS = 2000
"""Longest error message kept with a dead letter."""

Stage = Literal["deserializer", "operator", "sink"]


class DeadLetter:
    """The dead-letter sink as the chain uses it: builds the record, offers it, counts it."""

    def __init__(
        self,
        sink: Sink,
        settings: DeadLetterSettings,
        *,
        meter: Meter,
        pipeline: str,
        kafka_format: bool,
    ) -> None:
        self.sink = sink
        self.settings = settings
        self.pipeline = pipeline
        self.kafka_format = kafka_format
        self.offer_fn: Callable[[object, bytes | None, Lane, AckToken], Offer] = sink.offer
        self._meter = meter
        self._series: dict[tuple[str, str], CounterSeries] = {}
        self._breaches = {
            limit: meter.counter(DLQ_LIMIT_BREACHES, **_LABELS, limit=limit)
            for limit in ("max_ratio", "max_consecutive")
        }
        # max_consecutive: per lane, the last dead-lettered record and the run length.
        self._last: dict[Lane, tuple[int, int, bool]] = {}
        self._run: dict[Lane, int] = {}
        # max_ratio: two tumbling windows (previous, current) of records and dead letters.
        self._seen = [0, 0]
        self._dead = [0, 0]

    def seen(self, records: int) -> None:
        """``records`` more source records entered the chain (once per batch)."""
        if self._seen[1] >= self.settings.window:
            self._seen = [self._seen[1], 0]
            self._dead = [self._dead[1], 0]
        self._seen[1] += records

    def record(
        self,
        stage: Stage,
        reason: str,
        message: str,
        batch: PayloadBatch,
        index: int,
        fields: tuple[tuple[str, str], ...] = (),
    ) -> object:
        """The dead-letter row of record ``index`` of ``batch``; checks the limits first.

        ``fields`` are further error fields (a row a server refused: its ``code`` and
        ``code.name``, B246), written after the usual headers as ``spate.error.<name>``
        in the ``kafka`` format; a ``row`` dead letter has them in its message."""
        self._check_limits(batch, index)
        self.count(stage, reason)
        payload = bytes(batch.payloads[index])
        key = batch.keys[index]
        lane = batch.lane
        offset = batch.offsets[index]
        timestamp = batch.timestamps[index]
        message = message[:MAX_MESSAGE_CHARS]
        if self.kafka_format:
            values = (
                stage,
                reason,
                message,
                lane.stream,
                str(lane.partition),
                str(offset),
                str(timestamp),
                self.pipeline,
            )
            headers = [(n, v.encode()) for n, v in zip(HEADER_NAMES, values, strict=True)]
            headers += [(HEADER_PREFIX + name, value.encode()) for name, value in fields]
            return (key, payload, headers)
        return {
            "key": key.decode("utf-8", "replace") if key is not None else None,
            "payload": payload.decode("utf-8", "replace"),
            "error_stage": stage,
            "error_reason": reason,
            "error_message": message,
            "source_topic": lane.stream,
            "source_partition": lane.partition,
            "source_offset": offset,
            "source_timestamp": timestamp,
            "pipeline": self.pipeline,
        }

    def count(self, stage: str, reason: str) -> None:
        series = self._series.get((stage, reason))
        if series is None:
            series = self._meter.counter(DLQ_RECORDS, **_LABELS, stage=stage, reason=reason)
            self._series[(stage, reason)] = series
        series.inc()

    def _check_limits(self, batch: PayloadBatch, index: int) -> None:
        lane = batch.lane
        first = batch.first_offset
        at_end = index == len(batch.payloads) - 1
        prev = self._last.get(lane)
        run = self._run.get(lane, 0)
        if prev is not None and prev[0] == first and prev[1] == index:
            pass  # the same source record again (several rows of one record)
        elif prev is not None and (
            (prev[0] == first and prev[1] + 1 == index)
            or (prev[2] and index == 0 and prev[0] != first)
        ):
            run += 1
        else:
            run = 1
        self._last[lane] = (first, index, at_end)
        self._run[lane] = run
        limit = self.settings.max_consecutive
        if limit and run > limit:
            self._breaches["max_consecutive"].inc()
            raise FatalError(
                "dead_letter",
                f"{run} records in a row of {lane} were dead-lettered (max_consecutive is "
                f"{limit}); stopping so a broken deployment does not empty the topic into "
                "the dead-letter sink",
            )
        self._dead[1] += 1
        seen = self._seen[0] + self._seen[1]
        dead = self._dead[0] + self._dead[1]
        if self.settings.max_ratio < 1 and seen >= self.settings.window:
            ratio = dead / seen
            if ratio > self.settings.max_ratio:
                self._breaches["max_ratio"].inc()
                raise FatalError(
                    "dead_letter",
                    f"{dead} of the last {seen} records were dead-lettered ({ratio:.1%}, "
                    f"max_ratio is {self.settings.max_ratio:g}); stopping so a broken "
                    "deployment does not empty the topic into the dead-letter sink",
                )


def is_kafka_sink(settings: DeadLetterSettings, connector: str) -> bool:
    """Whether dead letters are offered in the ``kafka`` format to connector ``connector``."""
    if settings.format == "auto":
        return connector == "kafka"
    return settings.format == "kafka"
