"""Compiled Avro datum scanner for spate's columnar Avro decoder (Rust, PyO3).

``scan(program, body, ends, trailer)`` walks every datum of a framed batch against a
writer schema compiled into a :class:`Program` (by ``spate_avro._scan``) and returns the
indices of the datums that are not exactly one well-formed datum, among them every datum
whose array or map block declares more items than its bytes can hold: the columnar reader
reserves memory for that count and a corrupt one aborts the process (B110). The buffers
are read in place and the GIL is released while scanning.
"""

from spate_avro_native._native import MAX_DEPTH, ZERO_SIZE_ITEMS, Program, scan

__version__ = "0.1.0"

__all__ = ["MAX_DEPTH", "ZERO_SIZE_ITEMS", "Program", "__version__", "scan"]
