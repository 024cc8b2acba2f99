"""spate.testing: test pipelines without infrastructure.

* :func:`memory_source` → ``(source, handle)``: lanes of payloads in memory, views over
  one shared buffer, scripted rebalances, ``handle.last_committed(partition)``;
* :func:`capture_sink` → ``(sink, script)``: rows kept in memory, write outcomes scripted
  (``ok``, ``retryable``, ``fatal``, :func:`delay`, ``stuck``);
* :class:`FileSink` and :func:`read_file_sink`: an fsynced append-only JSON-lines file
  several processes can share, readable after ``kill -9``;
* :class:`SequenceSource` and :func:`read_offsets`: generated lanes whose commits survive
  the process, for multi-process delivery tests;
* :class:`CopyToSinkProcessor`: a minimal batch processor for runtime tests;
* :class:`ManualClock`: time that moves only when told to;
* :class:`AckRecorder`: ack tokens as a source makes them, and how each resolved;
* :class:`ScriptedFrameEndpoints`, :class:`ArrowTableBuffer` and
  :class:`IntFrameDeserializer`: a frame-taking connector with scripted outcomes and a
  frame deserializer, for tests of the columnar path (``spate[columnar]``);
* :class:`MemorySourceFactory`, :class:`CaptureSinkFactory`, :class:`FileSinkFactory`: the
  factories of core's built-in ``memory`` source and ``capture``/``file`` sinks;
* :class:`SinkConformance`, :class:`SourceConformance`, :class:`DeserializerConformance`:
  the suites a connector package runs from its own tests (:mod:`spate.testing.conformance`).

The conformance suites (and the unittest they bring) load on first use of their names:
core's built-in ``memory`` source and ``capture``/``file`` sinks live here, so every
pipeline using them imports this package, and none of them needs the suites.
"""

import importlib
from typing import TYPE_CHECKING

from spate._clock import ManualClock
from spate.testing._acks import AckRecorder
from spate.testing._buffered import BufferedSink, Row, SealedBatch
from spate.testing._capture_sink import (
    FATAL,
    OK,
    RETRYABLE,
    STUCK,
    CaptureScript,
    CaptureSink,
    Outcome,
    capture_sink,
    delay,
)
from spate.testing._factories import CaptureSinkFactory, FileSinkFactory, MemorySourceFactory
from spate.testing._file_sink import FileSink, read_file_sink
from spate.testing._frames import ArrowTableBuffer, IntFrameDeserializer, ScriptedFrameEndpoints
from spate.testing._memory_source import MemorySource, MemorySourceHandle, memory_source
from spate.testing._processors import CopyToSinkProcessor
from spate.testing._scripted import ScriptedEndpoints, ScriptedWriter, WriteAttempt, scripted_pool
from spate.testing._sequence_source import SequenceSource, read_offsets, sequence_payload

if TYPE_CHECKING:
    from spate.testing.conformance import (
        ConformanceFailure,
        DeserializerConformance,
        SinkConformance,
        SourceConformance,
    )

_CONFORMANCE = (
    "ConformanceFailure",
    "DeserializerConformance",
    "SinkConformance",
    "SourceConformance",
)


def __getattr__(name: str) -> object:
    if name in _CONFORMANCE:
        return getattr(importlib.import_module("spate.testing.conformance"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_CONFORMANCE})


__all__ = [
    "FATAL",
    "OK",
    "RETRYABLE",
    "STUCK",
    "AckRecorder",
    "ArrowTableBuffer",
    "BufferedSink",
    "CaptureScript",
    "CaptureSink",
    "CaptureSinkFactory",
    "ConformanceFailure",
    "CopyToSinkProcessor",
    "DeserializerConformance",
    "FileSink",
    "FileSinkFactory",
    "IntFrameDeserializer",
    "ManualClock",
    "MemorySource",
    "MemorySourceFactory",
    "MemorySourceHandle",
    "Outcome",
    "Row",
    "ScriptedEndpoints",
    "ScriptedFrameEndpoints",
    "ScriptedWriter",
    "SealedBatch",
    "SequenceSource",
    "SinkConformance",
    "SourceConformance",
    "WriteAttempt",
    "capture_sink",
    "delay",
    "memory_source",
    "read_file_sink",
    "read_offsets",
    "scripted_pool",
    "sequence_payload",
]
