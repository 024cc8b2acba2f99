"""Acknowledgements, partition tracking and the checkpointer."""

from spate.checkpoint._ack import AckStatus, AckToken

__all__ = ["AckStatus", "AckToken"]
