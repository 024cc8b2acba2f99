"""The columnar Avro path in tests: run where it is installed, skip naming why where not.

The columnar Avro path needs ``spate-avro-native``, its compiled datum scanner: a Rust
extension that ``scripts/bootstrap.sh`` builds only where cargo is installed (B137).
Every test that decodes Avro as columns — directly, through a pipeline, a child process
or a benchmark — says so through this module alone, so a machine with Python alone runs
``make test`` with those tests skipped and their reason printed (pytest's ``-ra``), and a
machine with cargo runs them all. The reason is spate-avro's own
(:func:`spate_avro._columnar.columnar_unavailable`): what is missing and how to install it.
"""

from __future__ import annotations

import pytest
from spate_avro._columnar import columnar_unavailable

AVRO_COLUMNAR_MISSING: str | None = columnar_unavailable()
"""Why Avro cannot be decoded as columns here, or None when it can."""

AVRO_COLUMNAR = AVRO_COLUMNAR_MISSING is None
"""Whether the columnar Avro path (spate-avro-native, jetliner, polars) is installed."""

SKIP_REASON = AVRO_COLUMNAR_MISSING or "the columnar Avro path is installed"
"""The reason every such test gives, for ``pytest.importorskip`` in a module that imports
``spate_avro_native`` itself."""

needs_avro_columnar = pytest.mark.skipif(not AVRO_COLUMNAR, reason=SKIP_REASON)
"""Mark a test, a parameter (``pytest.param(..., marks=needs_avro_columnar)``) or a
module (``pytestmark``) that needs the columnar Avro path."""
