"""Operator chains (compiled into one fused loop per batch) and the deserializer stage.

Users describe a chain with :class:`ChainContext` (``ctx.chain().map(f).sink()``); the
runtime compiles it with :func:`compile_chain` into a :class:`BatchProcessor`.
"""

from spate.ops._arrow import plain_column, plain_table
from spate.ops._builder import (
    Chain,
    ChainContext,
    ChainSpec,
    Emitter,
    SinkHandle,
    Split,
    build_chain,
)
from spate.ops._compile import compile_chain
from spate.ops._contract import BatchProcessor, ReportsSkips, Stalled
from spate.ops._deser import (
    NO_RECORD,
    BytesDeserializer,
    Deserializer,
    ManyDeserializer,
    PolicyDeserializer,
    own_policy,
    whole_payload,
)
from spate.ops._stage import Cursor

__all__ = [
    "NO_RECORD",
    "BatchProcessor",
    "BytesDeserializer",
    "Chain",
    "ChainContext",
    "ChainSpec",
    "Cursor",
    "Deserializer",
    "Emitter",
    "ManyDeserializer",
    "PolicyDeserializer",
    "ReportsSkips",
    "SinkHandle",
    "Split",
    "Stalled",
    "build_chain",
    "compile_chain",
    "own_policy",
    "plain_column",
    "plain_table",
    "whole_payload",
]
