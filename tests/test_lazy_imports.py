"""A pipeline's start imports what its connectors use, not what their packages could do.

Every ``spate run`` pays its imports before it reads a record (a restart after a crash
too), so the packages a plain-JSON pipeline on core's built-in connectors loads leave out
what only other configurations need: spate-json's registry mode (spate-avro's decoders,
fastavro, the registry client) and core's conformance suites (unittest). Their names still
resolve, on first use.
"""

from __future__ import annotations

import subprocess
import sys

START = """
import sys

import spate.testing
import spate_json
from spate.testing import FileSinkFactory, MemorySourceFactory
from spate_json import JsonConfig, JsonDeserializerFactory

unused = ("fastavro", "unittest", "spate_avro._registry", "spate.testing.conformance")
print(" ".join(m for m in unused if m in sys.modules))
"""


def test_a_plain_json_pipeline_starts_without_the_registry_decoders_or_the_conformance_suites() -> (
    None
):
    result = subprocess.run(
        [sys.executable, "-c", START], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == []


def test_the_names_loaded_on_first_use_still_resolve() -> None:
    import spate.testing
    import spate_avro
    import spate_json
    from spate.testing.conformance import SinkConformance
    from spate_avro._registry import SchemaRegistryClient
    from spate_json._confluent import ConfluentJsonDeserializer

    assert spate.testing.SinkConformance is SinkConformance
    assert spate_avro.SchemaRegistryClient is SchemaRegistryClient
    assert spate_json.ConfluentJsonDeserializer is ConfluentJsonDeserializer
    assert {"SinkConformance", "SchemaRegistryClient"} <= {*dir(spate.testing), *dir(spate_avro)}
