"""A backend applies a commit's writes -- as pairs (``apply``) or as columns of distinct keys
(``apply_distinct``, what a commit of the store's pending writes uses) -- and its ordered scans
see exactly the data, also when the hashmap backend's sorted index was built before the writes
(each write then keeps it up to date)."""

from __future__ import annotations

import random

import pytest

from spark_state.backends.hashmap import HashMapBackendFactory
from spark_state.backends.rocksdb import RocksDBBackendFactory
from spark_state.engine.epoch_writes import OverlayWrites
from spark_state.engine.overlay import WriteOverlay


def _backend(name: str, tmp_path):
    if name == "hashmap":
        return HashMapBackendFactory().create_empty(str(tmp_path / "db"))
    return RocksDBBackendFactory(block_cache_mb=8, write_buffer_mb=4, wal=False).create_empty(str(tmp_path / "db"))


@pytest.mark.parametrize("name", ["hashmap", "rocksdb"])
def test_writes_as_pairs_or_columns_and_scans_between_them_equal_a_dict(name, tmp_path) -> None:
    rng = random.Random(3)
    backend = _backend(name, tmp_path)
    model: dict[bytes, bytes] = {}
    scans = 0
    for step in range(300):
        keys = list(dict.fromkeys(bytes([rng.randrange(40)]) for _ in range(rng.randrange(1, 30))))
        puts = [k for k in keys if rng.random() < 0.6]
        deletes = [k for k in keys if k not in puts]
        value = b"v%d" % step
        if step % 2:
            backend.apply_distinct(puts, [value] * len(puts), deletes)
        else:
            backend.apply([(k, value) for k in puts] + [(k, None) for k in deletes])
        model.update((k, value) for k in puts)
        for k in deletes:
            model.pop(k, None)
        if rng.random() < 0.3:  # keys removed, re-added, added and removed again between scans
            scans += 1
            assert list(backend.iterate()) == sorted(model.items()), f"step {step}"
            assert list(backend.iterate(b"\x05", b"\x20")) == sorted(
                (k, v) for k, v in model.items() if b"\x05" <= k < b"\x20"), f"step {step}"
    assert scans > 50
    assert list(backend.iterate()) == sorted(model.items())
    assert backend.count_existing([b"\x00", b"\x01", b"\xff"]) == sum(k in model for k in (b"\x00", b"\x01"))
    backend.close()


@pytest.mark.parametrize("name", ["hashmap", "rocksdb"])
def test_an_epochs_pending_writes_apply_with_their_deletes(name, tmp_path) -> None:
    backend = _backend(name, tmp_path)
    backend.apply([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    for deletes in (True, False):
        overlay = WriteOverlay()
        overlay.put(b"d", b"4")
        overlay.put(b"a", b"10")
        if deletes:
            overlay.put(b"b", None)
            overlay.put(b"zz", None)  # a delete of a key that is not there
        OverlayWrites(overlay).apply_to(backend)
    assert list(backend.iterate()) == [(b"a", b"10"), (b"c", b"3"), (b"d", b"4")]
    backend.close()
