"""Sink contract and the shared sink pool.

The runtime sees :class:`Sink`; connectors implement :class:`SinkConnector` (buffers
and per-endpoint :class:`ShardWriter` s) and get a :class:`SinkPool` that does routing,
batching, retries, breakers, acks and metrics. Their config models embed
:class:`PoolConfig` (or its parts) and a list of :class:`ShardConfig`.
"""

from spate.sink._breaker import Breaker, BreakerState
from spate.sink._contract import (
    BatchDeserializer,
    FrameSink,
    LaneFlushingSink,
    MetaColumnsSink,
    Offer,
    RecordPolicySink,
    ReplayingSink,
    RowBatchSink,
    Sink,
    decodes_columns,
    flush_lanes,
    sink_record_policy,
    takes_frames,
    takes_rows,
)
from spate.sink._intents import Intent, IntentWriter, RecordPosition
from spate.sink._pool import SinkPool
from spate.sink._retry import Backoff
from spate.sink._router import Router, StartingRouter, WeightedHashRouter, fnv1a_64
from spate.sink._writer import (
    FrameBuffer,
    FrameConnector,
    ListRowBuffer,
    RowBatchConnector,
    RowBlock,
    RowBlockBuffer,
    RowBuffer,
    ShardWriter,
    SinkConnector,
    WriteBatch,
    estimate_row_bytes,
)
from spate.sink.config import (
    BatchConfig,
    BreakerConfig,
    InflightConfig,
    PoolConfig,
    PoolKeys,
    RetryConfig,
    ShardConfig,
)
from spate.sink.tiers import (
    BatchRef,
    JsonlStore,
    MemoryTier,
    MemoryTierConfig,
    SpoolConfig,
    SpoolCorruptError,
    SpoolStore,
    SpoolTier,
    StoredBatch,
    TeeSink,
)

__all__ = [
    "Backoff",
    "BatchConfig",
    "BatchDeserializer",
    "BatchRef",
    "Breaker",
    "BreakerConfig",
    "BreakerState",
    "FrameBuffer",
    "FrameConnector",
    "FrameSink",
    "InflightConfig",
    "Intent",
    "IntentWriter",
    "JsonlStore",
    "LaneFlushingSink",
    "ListRowBuffer",
    "MemoryTier",
    "MemoryTierConfig",
    "MetaColumnsSink",
    "Offer",
    "PoolConfig",
    "PoolKeys",
    "RecordPolicySink",
    "RecordPosition",
    "ReplayingSink",
    "RetryConfig",
    "Router",
    "RowBatchConnector",
    "RowBatchSink",
    "RowBlock",
    "RowBlockBuffer",
    "RowBuffer",
    "ShardConfig",
    "ShardWriter",
    "Sink",
    "SinkConnector",
    "SinkPool",
    "SpoolConfig",
    "SpoolCorruptError",
    "SpoolStore",
    "SpoolTier",
    "StartingRouter",
    "StoredBatch",
    "TeeSink",
    "WeightedHashRouter",
    "WriteBatch",
    "decodes_columns",
    "estimate_row_bytes",
    "flush_lanes",
    "fnv1a_64",
    "sink_record_policy",
    "takes_frames",
    "takes_rows",
]
