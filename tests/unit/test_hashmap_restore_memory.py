"""A hashmap snapshot loads a record batch at a time: beside the map it builds, a restore holds one
batch's entries, not the snapshot's (the map grows with the state; the transient must not)."""

from __future__ import annotations

import sys
import tracemalloc

from spark_state import constants as C
from spark_state.backends.hashmap import HashMapBackend, HashMapBackendFactory

#: Rows per record batch of the snapshots written here (the writer's is 65,536).
BATCH = 1000


def _load_transient(directory: str) -> tuple[int, int]:
    """(peak of Python's allocations above the loaded map, the map's own table) of one restore."""
    tracemalloc.start()
    try:
        backend = HashMapBackendFactory().open_snapshot(directory)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    table = sys.getsizeof(backend._data)  # type: ignore[attr-defined]
    backend.close()
    return peak - after, table


def test_a_restore_holds_one_batch_beside_the_map_whatever_the_snapshot_size(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "ARROW_BATCH_ROWS", BATCH)
    HashMapBackendFactory().open_snapshot(_snapshot(tmp_path / "warm", 10))  # modules loaded first
    for n in (25_000, 200_000):
        transient, table = _load_transient(_snapshot(tmp_path / str(n), n))
        # A dict that grows holds its old table while it copies it into the new one, at least twice
        # as large: at most half the final table. Beyond that, one batch's two lists of BATCH
        # references. (Measured: 0.36 MB and 3.1 MB, tables of 1.3 MB and 10.5 MB; the whole
        # snapshot's keys and values as two lists took 1.0 MB and 8.8 MB.)
        assert transient < table // 2 + 64 * BATCH + (64 << 10), (n, transient, table)


def _snapshot(directory, n: int) -> str:
    backend = HashMapBackend({b"key-%08d" % i: b"v%d" % i for i in range(n)})
    backend.write_snapshot(str(directory))
    return str(directory)
