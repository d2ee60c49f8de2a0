"""The engine against a real S3 server (moto, in its own process, over HTTP on loopback)."""

from __future__ import annotations

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.storage import open_storage
from support import restored_state, run_epochs

pytestmark = pytest.mark.s3


@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_every_retained_version_restores_bit_for_bit_from_s3(s3_location, tmp_path, backend):
    url, options = s3_location
    cfg = EngineConfig(backend=backend, snapshot_interval=3, retained_versions=6,
                       local_dir=str(tmp_path / "local"), storage_options=options)
    with VersionedStore(url, cfg) as store:
        history = run_epochs(store, 11, keys=200, writes_per_epoch=80)
        store.cleanup()
        assert store.versions() == list(range(6, 12))
    for version in range(6, 12):
        assert restored_state(url, cfg, version) == sorted(history[version].items())


def test_incremental_snapshot_on_s3_uploads_only_new_files(s3_location, tmp_path):
    url, options = s3_location
    cfg = EngineConfig(backend="rocksdb", snapshot_interval=1, local_dir=str(tmp_path / "local"),
                       storage_options=options)
    storage = open_storage(url, options)
    with VersionedStore(url, cfg) as store:
        store.load(0)
        store.put_many((b"key-%06d" % i for i in range(20_000)), (b"v" * 50 for _ in range(20_000)))
        store.commit()
        before = set(storage.list_dir("shared"))
        store.put(b"key-000001", b"changed")
        store.commit()
        after = set(storage.list_dir("shared"))
        assert len(after - before) == 1
        assert store.last_commit.snapshot_files_reused == len(before)
    assert restored_state(url, cfg, 2)[1] == (b"key-000001", b"changed")
