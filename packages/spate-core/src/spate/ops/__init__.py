"""Operator chains (compiled into one fused loop per batch) and the deserializer stage."""

from spate.ops._contract import BatchProcessor, Stalled
from spate.ops._deser import NO_RECORD, Deserializer, ManyDeserializer

__all__ = ["NO_RECORD", "BatchProcessor", "Deserializer", "ManyDeserializer", "Stalled"]
