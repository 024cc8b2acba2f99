"""Records out of a parsed response, and the key that makes two records the same (B75).

Owns dotted-path lookup (``data.items``, ``links.next``, ``rows.0.id``), loading a
``package.module:function`` reference, and turning one response into records
(:class:`Extractor`) and one record into its deduplication key (:class:`KeyMaker`).
Failures are :class:`RecordProblem` with a ``reason`` the source counts under its
``on_error`` policy; nothing here does I/O or keeps state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from spate.plugins import import_reference

MISSING = object()
"""What :func:`lookup` returns for a path that does not resolve."""


class RecordProblem(Exception):
    """A response or record that cannot become records: ``reason`` is the counted label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def lookup(value: Any, path: str) -> Any:
    """``value`` at dotted ``path`` (an all-digit part indexes a list); ``MISSING`` if none."""
    if not path:
        return value
    for part in path.split("."):
        if isinstance(value, dict):
            if part not in value:
                return MISSING
            value = value[part]
        elif isinstance(value, list) and part.isdigit():
            index = int(part)
            if index >= len(value):
                return MISSING
            value = value[index]
        else:
            return MISSING
    return value


def load_function(spec: str) -> Callable[[Any], Any]:
    """Import ``package.module:function``; ``ValueError`` when it is not callable."""
    obj = import_reference(spec)
    if not callable(obj):
        raise ValueError(f"{spec!r} is not callable")
    return obj


def parse_json(body: bytes) -> Any:
    """The parsed body; :class:`RecordProblem` ``not_json`` when it is not JSON."""
    try:
        return json.loads(body)
    except ValueError as exc:
        raise RecordProblem("not_json", f"the response is not JSON ({exc})") from None


class Extractor:
    """The records of one parsed response: a path into it, or a collector function."""

    def __init__(self, records: str, collector: Callable[[Any], Any] | None) -> None:
        self._path = records
        self._collector = collector

    def records(self, document: Any) -> list[Any]:
        """The records of ``document``; :class:`RecordProblem` when there are none to take."""
        if self._collector is not None:
            try:
                found = self._collector(document)
                return list(found) if found is not None else []
            except Exception as exc:
                raise RecordProblem("collector_error", f"the collector raised {exc!r}") from exc
        found = lookup(document, self._path)
        if found is MISSING or found is None:
            raise RecordProblem(
                "no_records", f"the path {self._path!r} does not resolve in the response"
            )
        if isinstance(found, list):
            return found
        if not self._path and isinstance(found, dict):
            return [found]
        raise RecordProblem(
            "no_records", f"the path {self._path or '(the response)'!r} holds no list of records"
        )


class KeyMaker:
    """The deduplication key of a record, as canonical JSON text (what the state keeps)."""

    def __init__(self, fields: Iterable[str] = (), function: Callable[[Any], Any] | None = None):
        self._fields = tuple(fields)
        self._function = function

    def key(self, record: Any) -> str:
        """The key text; :class:`RecordProblem` ``no_key`` when it cannot be made."""
        if self._function is not None:
            try:
                value = self._function(record)
            except Exception as exc:
                raise RecordProblem("no_key", f"the key function raised {exc!r}") from exc
        else:
            values = []
            for name in self._fields:
                found = lookup(record, name)
                if found is MISSING:
                    raise RecordProblem("no_key", f"a record has no field {name!r}")
                values.append(found)
            value = values
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise RecordProblem("no_key", f"the key is not JSON-encodable ({exc})") from None
