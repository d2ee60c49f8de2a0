"""Partition stores without Spark: versions per batch, the worker cache and when it must not be
trusted, rescale layouts, missing versions, the location's metadata."""

from __future__ import annotations

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.process import MaxParallelismMismatchError, StateLocationError, StateVersionMissingError
from spark_state.process.location import Layout, LocationSpec, list_layouts, storage_for, verify_location
from spark_state.process.stores import CACHE, acquire

CONFIG = EngineConfig(backend="hashmap")


def _all(old):
    return range(old.parallelism)


def _copy_all(store, old, old_stores):
    for source in old_stores.values():
        for key, value in source.iterate():
            store.put(key, value)


def _acquire(storage, n, i, batch):
    return acquire(storage, CONFIG, n, i, batch, _all, _copy_all)


@pytest.fixture
def storage(tmp_path):
    CACHE.clear()
    yield storage_for(str(tmp_path / "loc"), {})
    CACHE.clear()


def test_batches_commit_successive_versions_and_reuse_the_cached_store(storage):
    ps = _acquire(storage, 1, 0, 0)
    assert ps.origin == "new"
    ps.store.put(b"k", b"1")
    assert ps.commit() == 1
    ps = _acquire(storage, 1, 0, 1)
    assert ps.origin == "cached" and ps.store.get(b"k") == b"1"
    ps.store.put(b"k", b"2")
    assert ps.commit() == 2
    # a retry of batch 1 (after its commit) reloads version 1, not the cached version 2
    ps = _acquire(storage, 1, 0, 1)
    assert ps.origin == "loaded" and ps.store.get(b"k") == b"1"
    ps.discard()


def test_a_version_recommitted_elsewhere_is_not_served_from_the_cache(storage):
    ps = _acquire(storage, 1, 0, 0)
    ps.store.put(b"k", b"mine")
    ps.commit()
    # another worker process re-runs batch 0 (a task retry) and commits version 1 again
    with VersionedStore(storage.child(Layout(1, 0).store_path(0)), CONFIG) as other:
        other.load(0)
        other.put(b"k", b"theirs")
        other.commit()
    ps = _acquire(storage, 1, 0, 1)
    assert ps.origin == "loaded" and ps.store.get(b"k") == b"theirs"
    ps.discard()


def test_rescale_builds_a_new_layout_and_a_missing_version_is_a_clear_error(storage):
    for i in range(2):
        ps = _acquire(storage, 2, i, 0)
        ps.store.put(b"k%d" % i, b"v")
        ps.commit()
    ps = _acquire(storage, 3, 1, 1)
    assert ps.origin == "rescaled" and ps.layout == Layout(3, 1)
    assert sorted(k for k, _ in ps.store.iterate()) == [b"k0", b"k1"]
    assert ps.commit() == 2
    assert list_layouts(storage) == [Layout(2, 0), Layout(3, 1)]
    with pytest.raises(StateVersionMissingError, match=r"no state for batch 7 .*p2-b0 \(batch versions 1\.\.1\)"):
        _acquire(storage, 3, 0, 7)


def test_location_metadata_pins_kind_and_max_parallelism(tmp_path):
    s = storage_for(str(tmp_path / "meta"), {})
    verify_location(s, "keyed", 128)
    with pytest.raises(MaxParallelismMismatchError, match="pass max_parallelism=128"):
        verify_location(s, "keyed", 256)
    with pytest.raises(StateLocationError, match="holds state of a 'keyed' operator"):
        verify_location(s, "operator", None)
    spec = LocationSpec(explicit=None, root="s3://b/root/", name="Fn")
    assert spec.resolve("q-1") == "s3://b/root/q-1/Fn"
    with pytest.raises(StateLocationError, match="sql.streaming.queryId"):
        spec.resolve(None)
