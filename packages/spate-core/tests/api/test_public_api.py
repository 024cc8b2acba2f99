"""``import spate`` exposes exactly its public API: ``__all__`` is sorted, complete and
importable, and nothing public is left out of it."""

from __future__ import annotations

import types

import spate


def test_all_is_sorted_and_every_name_exists() -> None:
    names = [n for n in spate.__all__ if n != "__version__"]
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in spate.__all__:
        assert hasattr(spate, name), name


def test_every_public_name_is_listed() -> None:
    public = {
        name
        for name, value in vars(spate).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(spate.__all__), public - set(spate.__all__)


def test_importing_spate_loads_no_connector() -> None:
    import subprocess
    import sys

    code = (
        "import sys, spate; "
        "print(sorted(m for m in sys.modules if m.startswith(('spate_', 'confluent_kafka', "
        "'clickhouse_connect', 'fastavro', 'orjson', 'nats', 'aioboto3'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
