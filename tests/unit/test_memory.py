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


def _figures(table_properties: str) -> dict[str, str]:
    return dict(part.strip().split("=", 1) for part in table_properties.split(";") if "=" in part)


def test_a_reopened_database_keeps_the_shared_cache_and_bloom_filters(tmp_path):
    """A restored snapshot is an existing database directory: it must be opened with the shared
    block cache and write bloom filters like a new one (rocksdb would otherwise take the column
    family options of the directory's OPTIONS file: a private 8 MB cache, no filters)."""
    cfg = EngineConfig(backend="rocksdb", block_cache_mb=48, write_buffer_mb=16, local_dir=str(tmp_path / "l"))
    factory = backend_factory("rocksdb", cfg)
    directory = str(tmp_path / "db")
    for generation in (b"a", b"b"):  # new, then reopened
        backend = factory.open_snapshot(directory)
        backend.apply((generation + b"%07d" % n, b"v" * 16) for n in range(20_000))
        db = backend._db  # type: ignore[attr-defined]
        db.flush()
        assert db.property_int_value("rocksdb.block-cache-capacity") == 48 * 1024 * 1024
        figures = _figures(db.property_value("rocksdb.aggregated-table-properties"))
        assert figures["# entries for filter"] == figures["# entries"] != "0"
        backend.close()
