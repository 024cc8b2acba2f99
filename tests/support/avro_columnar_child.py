"""Columnar Avro decoding in a child process, for the abort-recovery tests (B98).

jetliner aborts the whole process on a datum declaring a huge array or map count, so a
test that may meet one decodes in a child: ``outcome`` runs in a process pool worker, and
``python -m tests.support.avro_columnar_child IN OUT`` decodes the pickled
``(schema, payloads)`` in ``IN`` and pickles the outcome to ``OUT``.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

Outcome = tuple[list[dict[str, Any]], list[int]]
"""The good rows (with ``__spate_row``) of every frame, and the batch indices refused."""


def set_scratch(directory: str) -> None:
    """Pool initializer: the scratch directory of every decoder in this process."""
    from spate_avro._scratch import SCRATCH_ENV

    os.environ[SCRATCH_ENV] = directory


def outcome(schema: Any, payloads: list[bytes]) -> Outcome:
    """The columnar decoder's rows and refused indices for ``payloads``."""
    from spate_avro._columnar import ColumnarAvroDecoder
    from spate_avro._schema import build_decoder

    decoder = ColumnarAvroDecoder(schema, build_decoder(schema))
    try:
        frames, errors = decoder.decode([memoryview(p) for p in payloads])
    finally:
        decoder.close()
    rows = [row for _, df in frames for row in df.to_dicts()]
    return rows, [index for index, _ in errors]


def main(argv: list[str]) -> int:
    source, target = argv
    with open(source, "rb") as file:
        schema, payloads = pickle.load(file)
    result = outcome(schema, payloads)
    with open(target, "wb") as file:
        pickle.dump(result, file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
