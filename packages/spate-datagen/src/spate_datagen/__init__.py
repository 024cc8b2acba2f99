"""Synthetic storefront events for spate demos, tests and benchmarks."""

__version__ = "0.1.0"
