"""Local disk and snapshots of a long-lived store stay bounded: RocksDB's info LOG is rolled
(each commit flushes and logs ~8 KB, so an unrolled LOG grows by megabytes per thousand
commits), and so is its MANIFEST (~200 bytes per flush, uploaded whole with every snapshot)."""

from __future__ import annotations

import glob
import os

from spark_state import EngineConfig, VersionedStore
from spark_state.backends.rocksdb import INFO_LOG_MAX_BYTES, INFO_LOGS_KEPT, MANIFEST_MAX_BYTES


def test_rocksdb_info_logs_are_rolled_and_bounded(tmp_path):
    store = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(local_dir=str(tmp_path / "local"),
                                                                snapshot_interval=5, retained_versions=5)).load(0)
    views = tmp_path / "views"
    for v in range(1, 241):
        store.put_many([b"k%05d" % ((v * 37 + i) % 3000) for i in range(500)], [b"x" * 20] * 500)
        store.commit()
        store.export_view(str(views / str(v)))  # what the provider does after every commit
    logs = glob.glob(str(tmp_path / "local" / "*" / "store-*" / "db-*" / "LOG*"))
    total = sum(os.path.getsize(p) for p in logs)
    assert any(os.path.basename(p).startswith("LOG.old") for p in logs), "the LOG never rolled: the test proves nothing"
    assert len(logs) <= INFO_LOGS_KEPT
    # The current LOG may exceed the limit by the lines of one flush before it rolls.
    assert total <= INFO_LOG_MAX_BYTES * INFO_LOGS_KEPT + 64 * 1024, logs
    store.load(240)  # snapshots never include info logs
    for descriptor in glob.glob(str(tmp_path / "ckpt" / "snapshots" / "*.json")):
        assert "LOG" not in open(descriptor).read()
    store.close()


def test_rocksdb_manifest_rolls_at_a_bounded_size(tmp_path):
    # Growing a MANIFEST to the limit takes over a thousand flushes; the option RocksDB
    # applies is what this checks (the soak test shows the effect: bench/soak.py).
    store = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(local_dir=str(tmp_path / "local"))).load(0)
    store.put(b"k", b"v")
    store.commit()
    options = glob.glob(str(tmp_path / "local" / "*" / "store-*" / "db-*" / "OPTIONS-*"))
    assert options
    assert f"max_manifest_file_size={MANIFEST_MAX_BYTES}" in open(max(options)).read()
    store.close()
