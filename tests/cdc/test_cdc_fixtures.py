"""The captured Debezium fixtures and the registry endpoint Apicurio's converter uses
(B363, B365). No service needed."""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.cdc import UNAVAILABLE, Record, as_json, envelope, event_ops
from tests.support.schema_registry import SchemaRegistryServer

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "debezium" / "postgres"
TABLES = ("customers", "orders")


def _post_artifact(
    registry: SchemaRegistryServer, subject: str, body: bytes, content_type: str
) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{registry.url}/apis/registry/v2/groups/default/artifacts?ifExists=RETURN_OR_UPDATE",
        data=body,
        method="POST",
        headers={
            "Content-Type": content_type,
            "X-Registry-ArtifactId": subject,
            "X-Registry-ArtifactType": "AVRO",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.load(response)
    return answer


def test_b363_registry_answers_apicurio_artifact_creation_with_confluent_ids() -> None:
    """B363: Apicurio's ``POST /apis/registry/v2/groups/{g}/artifacts`` registers under the
    subject named by ``X-Registry-ArtifactId``; its ``contentId`` (and ``globalId``) is the
    Confluent id, the same for the same schema, plain or ``{"content": ...}`` bodies."""
    schema = json.dumps({"type": "record", "name": "K", "fields": [{"name": "id", "type": "int"}]})
    with SchemaRegistryServer() as registry:
        first = _post_artifact(registry, "t-key", schema.encode(), "application/json")
        extended = json.dumps({"content": schema, "references": []}).encode()
        again = _post_artifact(registry, "t-key", extended, "application/create.extended+json")
        assert first["contentId"] == first["globalId"] == again["contentId"]
        assert first["id"] == "t-key" and first["version"] == "1"
        with urllib.request.urlopen(
            f"{registry.url}/schemas/ids/{first['contentId']}", timeout=10
        ) as response:
            assert json.load(response)["schema"] == schema
        with urllib.request.urlopen(
            f"{registry.url}/subjects/t-key/versions/latest", timeout=10
        ) as response:
            assert json.load(response)["id"] == first["contentId"]


def _records(converter: str, table: str) -> tuple[list[str], list[Record]]:
    cases, records = [], []
    for line in (FIXTURES / converter / f"{table}.jsonl").read_text().splitlines():
        entry = json.loads(line)

        def raw(text: str | None) -> bytes | None:
            if text is None:
                return None
            return base64.b64decode(text) if converter == "avro" else text.encode()

        cases.append(entry["case"])
        records.append(Record(entry["offset"], raw(entry["key"]), raw(entry["value"])))
    return cases, records


def _registry_with_fixture_schemas(registry: SchemaRegistryServer) -> None:
    schemas = json.loads((FIXTURES / "avro" / "schemas.json").read_text())
    for schema_id, entry in sorted(schemas.items(), key=lambda item: int(item[0])):
        assert registry.register(entry["subject"], entry["schema"]) == int(schema_id)


def test_b365_fixtures_agree_across_converters() -> None:
    """B365: every fixture converter holds the same cases in the same order with the same
    ops and keys; the Avro records decode (Confluent frame, ids from ``schemas.json``) to
    the JSON payloads; the shapes the README promises are there."""
    with SchemaRegistryServer() as registry:
        _registry_with_fixture_schemas(registry)

        def schema_text(schema_id: int) -> str:
            with urllib.request.urlopen(f"{registry.url}/schemas/ids/{schema_id}") as answer:
                return str(json.load(answer)["schema"])

        for table in TABLES:
            cases, plain = _records("json-plain", table)
            schema_cases, with_schema = _records("json-schemas", table)
            avro_cases, avro = _records("avro", table)
            assert cases == schema_cases == avro_cases
            decoded = as_json(avro, schema_text)
            assert event_ops(plain) == event_ops(with_schema) == event_ops(decoded)
            for one, other in zip(plain, decoded, strict=True):
                a, b = one.value_json(), other.value_json()
                if a is None or b is None:
                    assert a is b is None
                    continue
                for image in ("before", "after"):
                    left, right = a[image], envelope(b)[image]
                    if left is None or right is None:
                        assert left is right is None
                        continue
                    # Decimals: base64 of the unscaled integer in JSON, a number in Avro.
                    assert {k: v for k, v in left.items() if k != "balance"} == {
                        k: v for k, v in right.items() if k != "balance"
                    }
    _, customers = _records("json-plain", "customers")
    by_case = dict(zip(_records("json-plain", "customers")[0], customers, strict=False))
    toast = by_case["toast_unchanged"].value_json()
    assert toast is not None and toast["after"]["notes"] == UNAVAILABLE
    truncate = by_case["truncate"].value_json()
    assert truncate is not None and truncate["op"] == "t"
    added = by_case["column_added"].value_json()
    assert added is not None and added["after"]["email"] == "d@example.org"
