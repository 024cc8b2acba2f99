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
* plugin factories (``memory_source_factory``, ``sequence_source_factory``,
  ``capture_sink_factory``, ``file_sink_factory``) for YAML pipelines.
"""

from spate._clock import ManualClock
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
from spate.testing._factories import (
    CaptureSinkConfig,
    CaptureSinkFactory,
    FileSinkConfig,
    FileSinkFactory,
    MemorySourceConfig,
    MemorySourceFactory,
    SequenceSourceConfig,
    SequenceSourceFactory,
    capture_sink_factory,
    file_sink_factory,
    memory_source_factory,
    sequence_source_factory,
)
from spate.testing._file_sink import FileSink, read_file_sink
from spate.testing._memory_source import MemorySource, MemorySourceHandle, memory_source
from spate.testing._processors import CopyToSinkProcessor
from spate.testing._scripted import ScriptedEndpoints, ScriptedWriter, WriteAttempt, scripted_pool
from spate.testing._sequence_source import SequenceSource, read_offsets, sequence_payload

__all__ = [
    "FATAL",
    "OK",
    "RETRYABLE",
    "STUCK",
    "BufferedSink",
    "CaptureScript",
    "CaptureSink",
    "CaptureSinkConfig",
    "CaptureSinkFactory",
    "CopyToSinkProcessor",
    "FileSink",
    "FileSinkConfig",
    "FileSinkFactory",
    "ManualClock",
    "MemorySource",
    "MemorySourceConfig",
    "MemorySourceFactory",
    "MemorySourceHandle",
    "Outcome",
    "Row",
    "ScriptedEndpoints",
    "ScriptedWriter",
    "SealedBatch",
    "SequenceSource",
    "SequenceSourceConfig",
    "SequenceSourceFactory",
    "WriteAttempt",
    "capture_sink",
    "capture_sink_factory",
    "delay",
    "file_sink_factory",
    "memory_source",
    "memory_source_factory",
    "read_file_sink",
    "read_offsets",
    "scripted_pool",
    "sequence_payload",
    "sequence_source_factory",
]
