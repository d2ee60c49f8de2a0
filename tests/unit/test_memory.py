"""All RocksDB stores of a process share one block cache and write-buffer manager."""

from __future__ import annotations

from spark_state import EngineConfig, VersionedStore
from spark_state.backends import backend_factory
from spark_state.backends.rocksdb_resources import shared_resources


def test_rocksdb_stores_share_one_memory_budget(tmp_path):
    cfg = EngineConfig(backend="rocksdb", block_cache_mb=64, write_buffer_mb=16, local_dir=str(tmp_path / "l"))
    first = backend_factory("rocksdb", cfg)
    second = backend_factory("rocksdb", cfg)
    assert first.resources is second.resources
    resources = first.resources
    before = resources.usage_bytes()
    stores = [VersionedStore(str(tmp_path / f"ckpt{i}"), cfg) for i in range(3)]
    try:
        for i, store in enumerate(stores):
            store.load(0)
            store.put_many((b"%d-%06d" % (i, n) for n in range(5000)), (b"x" * 100 for _ in range(5000)))
            store.commit()
        # Memtables of all three stores are charged to the one shared cache.
        assert resources.usage_bytes() > before
        assert resources.write_buffer_manager.get_usage() > 0
    finally:
        for store in stores:
            store.close()


def test_a_new_size_resizes_the_shared_budget():
    resources = shared_resources(64, 16)
    again = shared_resources(128, 32)
    assert again is resources
    assert (again.block_cache_mb, again.write_buffer_mb) == (128, 32)
    assert again.write_buffer_manager.get_buffer_size() == 32 * 1024 * 1024
