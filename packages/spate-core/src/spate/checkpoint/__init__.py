"""Acknowledgements, partition tracking and the checkpointer (B1, B2, B5, B15)."""

from spate.checkpoint._ack import AckHolds, AckStatus, AckToken, release_all
from spate.checkpoint._committer import Committer
from spate.checkpoint._tracker import LaneSnapshot, PartitionTracker

__all__ = [
    "AckHolds",
    "AckStatus",
    "AckToken",
    "Committer",
    "LaneSnapshot",
    "PartitionTracker",
    "release_all",
]
