"""Fixtures for the JSON deserializer tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from spate import BuildContext, ManualClock
from spate.config import decode
from spate.metrics._meter import Meter
from spate_json import JsonConfig, JsonDeserializer, JsonDeserializerFactory


class _Budget:
    def acquire(self, nbytes: int) -> None:
        return None

    def release(self, nbytes: int) -> None:
        return None


def _build(raw: dict[str, Any]) -> JsonDeserializer:
    config = decode(JsonConfig, raw, "deserializer.json")
    context = BuildContext(
        pipeline="json-test",
        component="deserializer",
        meter=Meter("json-test"),
        clock=ManualClock(),
        run_nonce="r1",
        budget=_Budget(),
    )
    return JsonDeserializerFactory.build(config, context)


@pytest.fixture(scope="session")
def build_json() -> Callable[[dict[str, Any]], JsonDeserializer]:
    """Decode a ``deserializer: {json: ...}`` body and build the deserializer."""
    return _build
