"""Sink contract and the shared sink pool."""

from spate.sink._contract import Offer, Sink

__all__ = ["Offer", "Sink"]
