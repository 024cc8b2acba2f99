"""``StoreConformance``: the promises every spool store keeps (B54, B55; ADR 0005).

Subclass it as ``Test<Name>StoreConformance`` and give :meth:`StoreConformance.open_store`
(a store over a directory; each call opens the same data again, as a restart does)::

    class TestSqliteStoreConformance(StoreConformance):
        def open_store(self, directory):
            return SqliteStore(directory / "spool.db")

Checked on the real store: a fresh store recovers nothing; synced batches come back
after a reopen, in append order, with their records byte for byte (records are any
bytes, not text) and ordered, distinct
identities (B55); a released batch never comes back, and once every batch is released
and collected the store holds no bytes and no storage units (B54); releasing a batch
twice is an error.
"""

from __future__ import annotations

from pathlib import Path

from spate.sink.tiers._store import SpoolStore
from spate.testing.conformance._base import Conformance, Promise, check

STORE_REPLAY = Promise(
    "B55", "a store returns every synced batch after a restart, in order, records unchanged"
)
STORE_RELEASE = Promise(
    "B54", "a released batch never comes back and its space is reclaimed once all are released"
)
STORE_DOUBLE = Promise("B54", "releasing a batch twice is an error")

_BATCHES = [
    [b'{"v":1}', b'{"v":2}'],
    [b'{"text":"\\u00e9 and a # and a space"}'],
    [b'{"v":%d}' % i for i in range(50)],
    [b"\x01packed\nrun\x00\xff", b"", b"\n"],
]
"""Batches of records as the spool tier writes them: JSON, and any bytes at all (a packed
run of raw rows holds newlines, NULs, bytes that are not UTF-8; a record may be empty)."""


class StoreConformance(Conformance):
    """Subclass as ``Test<Name>StoreConformance`` and fill in :meth:`open_store`."""

    def open_store(self, directory: Path) -> SpoolStore:
        """A store over ``directory``; a second call reopens the same data."""
        raise NotImplementedError

    def _store(self) -> SpoolStore:
        return self.open_store(self.workdir / "store")

    def test_b55_a_fresh_store_recovers_nothing(self) -> None:
        store = self._store()
        found = store.recover()
        store.close()
        check(found == [], STORE_REPLAY, f"a fresh store recovered {len(found)} batches")

    def test_b55_synced_batches_come_back_in_order_after_a_restart(self) -> None:
        store = self._store()
        store.recover()
        refs = [store.append(batch) for batch in _BATCHES]
        store.sync()
        store.close()
        again = self._store()
        found = again.recover()
        again.close()
        check(
            [b.records for b in found] == _BATCHES,
            STORE_REPLAY,
            f"appended {_BATCHES!r}, recovered {[b.records for b in found]!r}",
        )
        check(
            [b.ref for b in found] == refs and refs == sorted(set(refs)),
            STORE_REPLAY,
            f"identities at append {refs}, at recovery {[b.ref for b in found]}",
        )

    def test_b54_released_batches_never_come_back(self) -> None:
        store = self._store()
        store.recover()
        refs = [store.append(batch) for batch in _BATCHES]
        store.sync()
        store.release(refs[0])
        store.close()
        again = self._store()
        found = again.recover()
        check(
            [b.records for b in found] == _BATCHES[1:],
            STORE_RELEASE,
            f"after releasing the first batch, recovered {[b.records for b in found]!r}",
        )
        for batch in found:
            again.release(batch.ref)
        again.collect()
        held, units = again.held_bytes(), again.segments()
        again.close()
        check(
            held == 0 and units == 0,
            STORE_RELEASE,
            f"everything released and collected, yet {held} bytes in {units} units held",
        )
        third = self._store()
        left = third.recover()
        third.close()
        check(left == [], STORE_RELEASE, f"{len(left)} released batches came back")

    def test_b54_releasing_a_batch_twice_is_an_error(self) -> None:
        store = self._store()
        store.recover()
        ref = store.append(_BATCHES[0])
        store.append(_BATCHES[1])
        store.sync()
        store.release(ref)
        try:
            store.release(ref)
        except Exception:
            return
        finally:
            store.close()
        check(False, STORE_DOUBLE, f"a second release of {ref} was accepted")
