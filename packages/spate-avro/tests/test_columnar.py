"""Columnar Avro decoding finds exactly the bad records the row path finds (B28).

A property test writes random records of random record schemas (and of the storefront
union) with fastavro, corrupts some payloads at random (truncation, trailing bytes, empty
payloads, flipped bytes, a huge array or map count spliced in), and checks that
:class:`ColumnarAvroDecoder` reports as bad exactly the payloads the row path's decoder
(fastavro, the reference) refuses, that every good payload's scalar fields decode to the
reference values, and that no batch aborts the process (the datum scan, B110).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from spate_avro._columnar import (
    _END,
    _SYNC,
    ROW_COLUMN,
    ColumnarAvroDecoder,
    _ends_of,
    _zigzag,
)
from spate_avro._scan import SCAN_ENV
from spate_avro._schema import build_decoder, parse_schema_text
from spate_avro._scratch import SCRATCH_ENV, write_at_start
from spate_datagen import storefront_schema_text

from tests.support.avro_columnar_child import Outcome, outcome, set_scratch
from tests.support.avro_native import needs_avro_columnar

pytestmark = needs_avro_columnar

ROOT = Path(__file__).resolve().parents[3]
ABORTED = (-6, 134)
"""Exit statuses of a process that aborted (SIGABRT)."""

SCALARS: dict[str, Any] = {
    "long": st.integers(-(2**63), 2**63 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "string": st.text(max_size=12),
    "boolean": st.booleans(),
    "double": st.floats(allow_nan=False),
    "nullable_long": st.none() | st.integers(-(2**40), 2**40),
    "enum": st.sampled_from(["A", "B", "C"]),
    "ints": st.lists(st.integers(-1000, 1000), max_size=4),
    "tags": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
}


def field_type(kind: str, i: int) -> Any:
    if kind == "nullable_long":
        return ["null", "long"]
    if kind == "enum":
        return {"type": "enum", "name": f"E{i}", "symbols": ["A", "B", "C"]}
    if kind == "ints":
        return {"type": "array", "items": "int"}
    if kind == "tags":
        return {"type": "map", "values": "string"}
    return kind


@st.composite
def batches(draw: st.DrawFn) -> tuple[Any, list[bytes], list[dict[str, Any]]]:
    kinds = draw(st.lists(st.sampled_from(sorted(SCALARS)), min_size=1, max_size=6))
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": f"f{i}", "type": field_type(k, i)} for i, k in enumerate(kinds)],
    }
    parsed = fastavro.parse_schema(schema)
    records = draw(
        st.lists(
            st.fixed_dictionaries({f"f{i}": SCALARS[k] for i, k in enumerate(kinds)}),
            min_size=1,
            max_size=40,
        )
    )
    payloads = []
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        payloads.append(out.getvalue())
    corruptions = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(payloads) - 1),
                st.sampled_from(["truncate", "trailing", "empty", "flip", "count"]),
                st.integers(0, 255),
            ),
            max_size=4,
        )
    )
    for index, how, byte in corruptions:
        p = payloads[index]
        if how == "truncate" and p:
            payloads[index] = p[: byte % len(p)]
        elif how == "trailing":
            payloads[index] = p + bytes([byte])
        elif how == "empty":
            payloads[index] = b""
        elif how == "count":  # a block of six billion items where an array or map starts
            at = _field_start(schema, records[index], byte)
            payloads[index] = p[:at] + _zigzag(6_000_000_000) + p[at:]
        elif p:
            at = byte % len(p)
            payloads[index] = p[:at] + bytes([p[at] ^ 0xFF]) + p[at + 1 :]
    return parsed, payloads, records


def _field_start(schema: dict[str, Any], record: dict[str, Any], pick: int) -> int:
    """Where in ``record``'s datum its first array or map field starts (any field's start
    when it has none): the bytes of the fields before it."""
    fields = schema["fields"]
    kinds = [f["type"]["type"] if isinstance(f["type"], dict) else None for f in fields]
    blocks = [i for i, kind in enumerate(kinds) if kind in ("array", "map")]
    k = blocks[pick % len(blocks)] if blocks else pick % (len(fields) + 1)
    head = fastavro.parse_schema({**schema, "name": "Head", "fields": fields[:k]})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, head, {f["name"]: record[f["name"]] for f in fields[:k]})
    return len(out.getvalue())


def reference(decode: Any, payloads: list[bytes]) -> tuple[set[int], dict[int, Any]]:
    bad, good = set(), {}
    for i, payload in enumerate(payloads):
        try:
            good[i] = decode(payload, 0)
        except Exception:
            bad.add(i)
    return bad, good


def columnar(parsed: Any, payloads: list[bytes]) -> tuple[Any, list[Any], list[Any]]:
    """The row path's decode function, and the columnar frames and errors of ``payloads``.

    Decoded from views and from the whole ``bytes`` (what a Kafka batch hands over, B97):
    the frames and the errors by batch index must be the same (B28)."""
    decode = build_decoder(parsed)
    decoder = ColumnarAvroDecoder(parsed, decode)
    try:
        frames, errors = decoder.decode([memoryview(p) for p in payloads])
        from_bytes, bytes_errors = decoder.decode(list(payloads))
    finally:
        decoder.close()
    assert same_frames(from_bytes, frames)
    assert [(i, str(e), e.kind) for i, e in bytes_errors] == [
        (i, str(e), e.kind) for i, e in errors
    ]
    return decode, frames, errors


def same_frames(left: list[Any], right: list[Any]) -> bool:
    return len(left) == len(right) and all(
        a_name == b_name and a.equals(b)
        for (a_name, a), (b_name, b) in zip(left, right, strict=True)
    )


def _canonical(parsed: Any, payload: bytes, record: Any) -> bool:
    """Whether ``payload`` is exactly how Avro writes the record it decodes to, every
    value in its type's range (the reference reads an ``int`` beyond 32 bits leniently,
    and writes it back as it read it)."""
    if not fastavro.validation.validate(record, parsed, raise_errors=False):
        return False
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue() == payload


class ChildDecoder:
    """A persistent child process that decodes batches as columns; restarted when a batch
    aborts it (jetliner 0.2 aborts on a datum declaring a huge count, B98, unless the
    datum scan refuses it first, B110)."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        self._pool: ProcessPoolExecutor | None = None

    def run(self, schema: Any, payloads: list[bytes]) -> Outcome | None:
        """The outcome, or None when the child died decoding the batch."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=set_scratch,
                initargs=(str(self._scratch),),
            )
        try:
            return self._pool.submit(outcome, schema, payloads).result()
        except BrokenProcessPool:
            self.close()
            return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChildDecoder]:
    decoder = ChildDecoder(tmp_path_factory.mktemp("scratch"))
    yield decoder
    decoder.close()


_INT_SCHEMA = fastavro.parse_schema(
    {"type": "record", "name": "R", "fields": [{"name": "f0", "type": "int"}]}
)
_BEYOND_INT32 = bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x01])  # 2^34 zigzagged: 2^35
"""A varint beyond 32 bits in an ``int`` field: the columnar decoder refuses it, the
reference reads it leniently (hypothesis found it once in a CI-scale run)."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
@example((_INT_SCHEMA, [_BEYOND_INT32, bytes([0x02])], []))
def test_b28_b110_columnar_decoder_finds_exactly_the_records_fastavro_refuses(
    child: ChildDecoder, batch: tuple[Any, list[bytes], list[dict[str, Any]]]
) -> None:
    """The columnar decode runs in a child process, so that a corrupt datum that aborted
    the reader would kill the child, not pytest: with the datum scan on, no batch may
    abort it (B110), and the outcome matches the reference exactly (B28)."""
    parsed, payloads, _records = batch
    result = child.run(parsed, payloads)
    assert result is not None, "the columnar decoder aborted the process"
    rows, refused_rows = result
    bad, good = reference(build_decoder(parsed), payloads)
    refused = set(refused_rows)
    # Beyond what the reference refuses, only payloads that are not canonical Avro (a
    # boolean byte other than 0 or 1, an int beyond 32 bits: the reference reads both
    # leniently) are refused.
    assert bad <= refused
    for i in refused - bad:
        assert not _canonical(parsed, payloads[i], good[i]), payloads[i]
        del good[i]
    assert sorted(row[ROW_COLUMN] for row in rows) == sorted(good)
    for row in rows:
        expected = good[row[ROW_COLUMN]]
        for name, value in expected.items():
            if isinstance(value, (int, str, bool, float)) or value is None:
                same = row[name] == value or (value != value and row[name] != row[name])
                assert same, (name, row, expected)  # NaN equals NaN here
            elif isinstance(value, list):
                assert row[name] == value


POISON_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "P",
        "fields": [
            {"name": "a", "type": {"type": "array", "items": "long"}},
            {"name": "s", "type": "string"},
        ],
    }
)


def poison_batch() -> list[bytes]:
    """Good datums around one whose array declares six billion items."""
    good = [
        _zigzag(2) + _zigzag(i) + _zigzag(i + 1) + _zigzag(0) + _zigzag(1) + b"x" for i in range(4)
    ]
    poison = _zigzag(6_000_000_000) + _zigzag(1) + _zigzag(0) + _zigzag(1) + b"x"
    return [good[0], good[1], poison, good[2], good[3]]


def decode_in_subprocess(
    scratch: Path, work: Path, payloads: list[bytes], scan: bool = False
) -> tuple[int, Any]:
    """Exit status and outcome of a decode in a fresh process; without the datum scan
    unless ``scan`` (the B98 backstop is what the scan would hide)."""
    source, target = work / "in.pickle", work / "out.pickle"
    source.write_bytes(pickle.dumps((POISON_SCHEMA, payloads)))
    target.unlink(missing_ok=True)
    env = {**os.environ, SCRATCH_ENV: str(scratch), SCAN_ENV: "1" if scan else "0"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.avro_columnar_child", str(source), str(target)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    return done.returncode, pickle.loads(target.read_bytes()) if target.exists() else None


def assert_fastavros_outcome(payloads: list[bytes], result: Outcome) -> None:
    """The poison batch's outcome is fastavro's: the poison (index 2) refused, the good
    datums' rows in order with fastavro's values."""
    rows, refused = result
    bad, good = reference(build_decoder(POISON_SCHEMA), payloads)
    assert bad == {2}
    assert refused == [2]
    assert [row[ROW_COLUMN] for row in rows] == sorted(good)
    assert [{"a": row["a"], "s": row["s"]} for row in rows] == [good[i] for i in sorted(good)]


def test_b98_a_datum_that_aborts_the_reader_is_a_record_error_in_the_next_process(
    tmp_path: Path,
) -> None:
    """B98, the backstop behind the datum scan (switched off here): the first process
    aborts inside jetliner on the poison datum (if it does not, the test fails: the
    recovery would go unexercised); the next process with the same scratch directory
    decodes the same batch to exactly fastavro's outcome and removes the leftover."""
    scratch = tmp_path / "scratch"
    payloads = poison_batch()
    status, _ = decode_in_subprocess(scratch, tmp_path, payloads)
    assert status in ABORTED
    assert sorted(p.suffix for p in scratch.iterdir() if p.stat().st_size) == [".avro", ".ends"]
    status, result = decode_in_subprocess(scratch, tmp_path, payloads)
    assert status == 0
    assert_fastavros_outcome(payloads, result)
    assert list(scratch.iterdir()) == []
    # The leftover is gone once recovered: a fresh process meeting the poison again
    # aborts again (one abort per delivery of a poison datum).
    status, _ = decode_in_subprocess(scratch, tmp_path, payloads)
    assert status in ABORTED


def test_b110_a_datum_declaring_billions_of_items_is_a_record_error_without_an_abort(
    tmp_path: Path,
) -> None:
    """B110: with the datum scan on, the batch holding a datum whose array declares six
    billion items decodes in the first process (exit 0) to exactly fastavro's outcome,
    and nothing is left in the scratch directory."""
    scratch = tmp_path / "scratch"
    payloads = poison_batch()
    status, result = decode_in_subprocess(scratch, tmp_path, payloads, scan=True)
    assert status == 0
    assert_fastavros_outcome(payloads, result)
    assert list(scratch.iterdir()) == []


def test_b110_a_datum_fastavro_would_read_without_bound_is_never_handed_to_it() -> None:
    """B110: fastavro reads items of zero size one by one whatever count a block declares
    (six billion nulls would take all memory), so a datum the scan refuses in a schema
    with such items is a record error without the reference decoder being asked; the
    good datums around it decode as columns."""
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "Z",
            "fields": [
                {"name": "n", "type": {"type": "array", "items": "null"}},
                {"name": "s", "type": "string"},
            ],
        }
    )
    good = _zigzag(2) + _zigzag(0) + _zigzag(1) + b"x"
    poison = _zigzag(6_000_000_000) + _zigzag(0) + _zigzag(1) + b"x"
    asked: list[bytes] = []
    reference_decode = build_decoder(schema)

    def check(datum: Any, start: int) -> object:
        asked.append(bytes(datum))
        return reference_decode(datum, start)

    decoder = ColumnarAvroDecoder(schema, check)
    try:
        frames, errors = decoder.decode([good, poison, good])
    finally:
        decoder.close()
    assert [i for i, _ in errors] == [1]
    assert "malformed" in str(errors[0][1])
    assert poison not in asked
    assert frames[0][1].select(ROW_COLUMN, "s").rows() == [(0, "x"), (2, "x")]


STOREFRONT = parse_schema_text(storefront_schema_text())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 199), st.integers(0, 255)), max_size=6))
def test_b28_union_split_by_branch_keeps_bad_records_exact(cuts: list[tuple[int, int]]) -> None:
    from spate_datagen import encode_avro, storefront_events

    payloads = [encode_avro(e) for e in storefront_events(200)]
    for index, byte in cuts:
        p = payloads[index]
        payloads[index] = p[: byte % max(len(p), 1)] if byte % 2 else p + bytes([byte])
    decode, frames, errors = columnar(STOREFRONT, payloads)
    bad, good = reference(decode, payloads)
    assert {i for i, _ in errors} == bad
    for name, df in frames:
        for row in df.select("order_id", ROW_COLUMN).iter_rows():
            expected = good[row[1]]
            assert expected.name == name
            assert expected.record["order_id"] == row[0]
    assert sum(df.height for _, df in frames) == len(good)


def test_b21_b28_confluent_batches_group_by_schema_id_through_the_registry(
    kit: Any, schema_registry: Any
) -> None:
    """Two schema ids in one batch, a bad frame and a truncated datum: the frames hold the
    good records with their batch indices; an unknown id stalls the whole batch (B21)."""
    from spate import DeserError, DeserErrorKind

    user = {
        "type": "record",
        "name": "User",
        "namespace": "t",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
    }
    user_id = schema_registry.register("users-value", user)
    union_id = schema_registry.register("events-value", kit.union)
    deser = kit.build(
        {"mode": "confluent", "registry": {"url": schema_registry.url}, "fetch_wait": "5s"}
    )
    try:
        assert deser.columnar
        payloads = []
        for i in range(30):
            payloads.append(kit.confluent(user_id, kit.encode(user, {"id": i, "name": f"u{i}"})))
            event = ("spate.datagen.PaymentCaptured", {"order_id": i, "amount_cents": 3})
            payloads.append(kit.confluent(union_id, kit.encode(kit.union, event)))
        payloads[4] = b"\x01\x00\x00\x00\x01"  # wrong magic byte
        payloads[6] = payloads[6][:-2]  # truncated
        frames, errors = deser.deserialize_batch([memoryview(p) for p in payloads])
        assert [i for i, _ in errors] == [4, 6]
        # A Kafka batch's whole ``bytes`` decode the same as views of them (B97).
        from_bytes, bytes_errors = deser.deserialize_batch(list(payloads))
        assert same_frames(from_bytes, frames)
        assert [(i, str(e)) for i, e in bytes_errors] == [(i, str(e)) for i, e in errors]
        users = [df for name, df in frames if name is None]
        events = [df for name, df in frames if name == "spate.datagen.PaymentCaptured"]
        assert users[0].get_column(ROW_COLUMN).to_list() == [
            r for r in range(0, 60, 2) if r not in (4, 6)
        ]
        assert users[0].get_column("id").to_list() == [
            r // 2 for r in range(0, 60, 2) if r not in (4, 6)
        ]
        assert events[0].get_column(ROW_COLUMN).to_list() == list(range(1, 60, 2))
        unknown = memoryview(kit.confluent(999, b"\x02"))
        with pytest.raises(DeserError) as row_path:
            deser.deserialize(unknown)
        if row_path.value.kind is DeserErrorKind.NOT_READY:
            with pytest.raises(DeserError) as caught:
                deser.deserialize_batch([unknown])
            assert caught.value.kind is DeserErrorKind.NOT_READY
        else:
            _, errors = deser.deserialize_batch([unknown])
            assert [(i, e.kind) for i, e in errors] == [(0, row_path.value.kind)]
    finally:
        deser.close()


def test_b28_union_branch_index_of_two_bytes_is_read_back_and_checked() -> None:
    """A union of 130 records: datums of branches 64 and 65 (a two-byte index whose first
    byte is ``2 * index``) decode as columns; a datum whose two-byte index is past the
    union (first byte that of branch 64) is refused exactly as the row path refuses it,
    never read as branch 64 (B28); a valid index of 128 or more is a record error."""
    union = [
        {"type": "record", "name": f"E{i}", "fields": [{"name": "n", "type": "long"}]}
        for i in range(130)
    ]
    parsed = fastavro.parse_schema(union)
    payloads = []
    for branch, n in [(0, 10), (64, 11), (65, 12), (64, 13), (129, 14)]:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, (f"E{branch}", {"n": n}))
        payloads.append(out.getvalue())
    past_union = b"\x80\x03" + payloads[1][2:]  # index 192: the union has 130 branches
    payloads.insert(2, past_union)
    decode, frames, errors = columnar(parsed, payloads)
    bad, _ = reference(decode, payloads)
    assert bad == {2}
    assert [i for i, _ in errors] == [2, 5]
    assert "128 or more" in str(errors[1][1])
    rows = {name: df.select(ROW_COLUMN, "n").rows() for name, df in frames if name is not None}
    assert rows == {"E0": [(0, 10)], "E64": [(1, 11), (4, 13)], "E65": [(3, 12)]}


GOOD = poison_batch()[:2] + poison_batch()[3:]


def _die(decoder: ColumnarAvroDecoder, stage: int, datums: list[bytes]) -> None:
    """Leave ``datums`` in the decoder's batch file as an owner killed while reading them
    would (the lock released, the files kept), as written by read ``stage``."""
    reader = decoder._readers[0]
    body = b"".join(d + _END for d in datums)
    block = b"".join(
        (reader._headers[stage], _zigzag(len(datums)), _zigzag(len(body)), body, _SYNC)
    )
    file = reader._file
    write_at_start(file.ends_fd, _ends_of(datums))
    write_at_start(file.fd, block)
    reader._finalizer.detach()
    os.close(file.fd)
    os.close(file.ends_fd)


def _decoder() -> ColumnarAvroDecoder:
    return ColumnarAvroDecoder(POISON_SCHEMA, build_decoder(POISON_SCHEMA))


def _decode(decoder: ColumnarAvroDecoder, payloads: list[bytes]) -> tuple[list[int], list[int]]:
    frames, errors = decoder.decode([memoryview(p) for p in payloads])
    rows = [r for _, df in frames for r in df.get_column(ROW_COLUMN).to_list()]
    return rows, [i for i, _ in errors]


def test_b98_a_live_owners_batch_file_is_never_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B98: a batch file whose owner still holds its lock is someone's read in progress."""
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
    alive = _decoder()
    file = alive._readers[0]._file
    write_at_start(file.fd, alive._readers[0]._headers[0] + b"\x02\x02\x00" + _SYNC)
    other = _decoder()
    try:
        assert not other._readers[0]._suspecting
        assert os.path.getsize(file.path) > 0
    finally:
        other.close()
        alive.close()
    assert list(tmp_path.iterdir()) == []


def test_b98_leftovers_of_each_read_are_checked_read_alone_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B98: datums of a batch that aborted are checked with the reference decoder; datums
    the reference accepted that aborted together are read one by one; a datum that
    aborted alone is a record error without being read; once seen, the normal path is
    back. A dead owner's leftover of another schema is left where it is."""
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
    stranger = ColumnarAvroDecoder(STOREFRONT, build_decoder(STOREFRONT))
    dying = [_decoder() for _ in range(3)]
    _die(stranger, 0, [b"\x00"])
    _die(dying[0], 0, [GOOD[0], GOOD[1]])
    _die(dying[1], 1, [GOOD[2]])
    _die(dying[2], 2, [GOOD[3]])
    decoder = _decoder()
    try:
        reader = decoder._readers[0]
        assert [len(s) for s in reader._suspects] == [2, 1, 1]
        assert [p.stat().st_size > 0 for p in tmp_path.glob("*.avro")].count(True) == 1
        assert _decode(decoder, GOOD) == ([0, 1, 2], [3])
        assert not reader._suspecting
        assert _decode(decoder, GOOD) == ([0, 1, 2, 3], [])
    finally:
        decoder.close()
        stranger.close()
    assert sorted(p.suffix for p in tmp_path.iterdir() if p.stat().st_size) == [".avro", ".ends"]


ROW_START = """
import sys

from spate_avro._factory import _columnar
from spate_avro._schema import build_decoder, parse_schema_text
from spate_datagen import storefront_schema_text

writer = parse_schema_text(storefront_schema_text())
decoder = _columnar(writer, None, build_decoder(writer, None))
assert decoder is not None, "the storefront union decodes columnar"
print(" ".join(sorted(m for m in ("jetliner", "polars") if m in sys.modules)))
"""


def test_building_the_columnar_decoder_imports_neither_polars_nor_jetliner() -> None:
    """A row pipeline (the flagship) builds the columnar decoder it never uses: that costs
    no polars import at start-up; the first columnar batch imports it (B28 above)."""
    result = subprocess.run(
        [sys.executable, "-c", ROW_START], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == []
