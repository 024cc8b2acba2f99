"""Without spate-avro-native (a machine without cargo) the columnar Avro path says what
is missing and how to install it from a checkout, never ``pip install spate[columnar]``,
which fetches another project (B136, B137)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from spate import ErrorPolicy
from spate_avro import _columnar
from spate_avro._deserializer import RawAvroDeserializer


def _without_native(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "spate_avro_native" else real(name, *args, **kwargs)

    monkeypatch.setattr(_columnar.importlib.util, "find_spec", find_spec)


def test_b137_the_missing_extension_is_named_with_its_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _without_native(monkeypatch)
    assert not _columnar.columnar_available()
    reason = _columnar.columnar_unavailable()
    assert reason is not None
    assert "spate-avro-native not installed" in reason and "cargo" in reason
    assert 'pip install ./packages/spate-avro-native "./packages/spate-avro[columnar]"' in reason
    deserializer = RawAvroDeserializer(lambda data, at: data, ErrorPolicy.SKIP)
    with pytest.raises(RuntimeError) as info:
        deserializer.deserialize_batch([b"x"])
    assert str(info.value) == reason
    assert "spate[columnar]" not in str(info.value)
