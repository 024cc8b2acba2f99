"""Conformance suites a connector package runs from its own tests (issue 13; B27).

Subclass the suite of your connector's kind in a test module, name the subclass
``Test…`` so pytest collects it, and fill in its hooks::

    from spate.testing.conformance import SinkConformance


    class TestSqliteSinkConformance(SinkConformance):
        factory = SqliteSinkFactory
        tag = "sqlite"
        dedup_by_token = True

        def config(self): ...  # a sink over a fresh destination in self.workdir
        def rows(self, count): ...  # count distinct rows the sink accepts
        def written(self): ...  # the rows now in the destination

* :class:`SinkConformance` — delivered acks mean rows in the destination (B2), teardown
  fails held acks (B4), retries resend the same batch and token (B9), transient errors
  are retryable (B12), bad rows are refused on append (B28), unreachable endpoints are
  named (B29), each holder releases an ack once (B39), ``flush_lanes`` writes every row
  of the lanes it is given (B40); for a sink that declares ``offer_rows``
  (:class:`~spate.sink.RowBatchSink`) or ``offer_frame`` (:class:`~spate.sink.FrameSink`),
  bad rows come back by position, the rest is taken all or nothing, and a full sink
  refuses the whole batch retaining nothing and takes it again later (B7, B8, B95);
* :class:`SourceConformance` — every record once in offset order then ``drained()``
  once, commits never pass what was handed out, no commit of its own, exact resume at
  a synchronous commit (B1), pause/resume (B7);
* :class:`DeserializerConformance` — whole and sliced views decode alike, values do
  not borrow the view, malformed and truncated payloads raise ``DeserError`` (B28);
* :class:`StoreConformance` — a spool store (``spate.stores``) returns every synced
  batch after a restart, in order; released batches never come back and their space
  is reclaimed (B54, B55);
* every suite also checks the config-model convention: a frozen keyword-only dataclass,
  unknown keys and bad values refused with their dotted path (B17).

A broken promise fails with :class:`ConformanceFailure`, whose message starts with the
promise (``B2 broken (a sink reports rows written … only once they are durable): …``).
Tests that do not apply (no hook given) are skipped. The suites do not import pytest.

The coordination store suite lives with its protocol, in ``spate_coordination.testing``
(spate-core does not depend on spate-coordination).
"""

from spate.testing.conformance._base import (
    ConfigConformance,
    Conformance,
    ConformanceFailure,
    Promise,
    conformance_context,
)
from spate.testing.conformance._deserializer import DeserializerConformance
from spate.testing.conformance._sink import SinkConformance
from spate.testing.conformance._source import RecordingEvents, SourceConformance
from spate.testing.conformance._store import StoreConformance

__all__ = [
    "ConfigConformance",
    "Conformance",
    "ConformanceFailure",
    "DeserializerConformance",
    "Promise",
    "RecordingEvents",
    "SinkConformance",
    "SourceConformance",
    "StoreConformance",
    "conformance_context",
]
