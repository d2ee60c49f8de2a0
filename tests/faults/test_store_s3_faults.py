"""The engine (VersionedStore) on S3 through the fault proxy: commits survive a steady share
of transient faults, a cut multipart upload of a snapshot SST is redone, and a permission
error half-way through a commit fails it clearly without ever exposing a partial version."""

from __future__ import annotations

import random
import re

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.errors import StorageError
from spark_state.storage import open_storage
from support import restored_state, run_epochs

pytestmark = pytest.mark.s3

#: ~24% of all requests fail, one way or another (the first rule that fires wins).
MIXED_FAULTS = [("slowdown", 0.07), ("internal", 0.05), ("drop", 0.05), ("lose-reply", 0.05), ("cut-body", 0.05)]


def _config(tmp_path, options, **kwargs) -> EngineConfig:
    return EngineConfig(local_dir=str(tmp_path / "local"), storage_options=options, **kwargs)


OPS = ["PutObject", "GetObject", "HeadObject", "ListObjectsV2", "DeleteObjects"]


def test_every_commit_survives_a_quarter_of_requests_failing(proxied_s3, tmp_path) -> None:
    proxy = proxied_s3.proxy
    # The first request of each kind fails for sure (rare kinds such as the cleanup's batch
    # delete might otherwise escape by chance), then about a quarter of all requests.
    for op, (kind, _) in zip(OPS, MIXED_FAULTS):
        proxy.add(kind, ops={op}, limit=1)
    for kind, share in MIXED_FAULTS:
        proxy.add(kind, share=share)
    cfg = _config(tmp_path, proxied_s3.options, backend="rocksdb", snapshot_interval=3, retained_versions=4)
    with VersionedStore(proxied_s3.url, cfg) as store:
        history = run_epochs(store, 8, keys=150, writes_per_epoch=60)
        store.cleanup()
        assert store.versions() == [5, 6, 7, 8]
        stats = store.storage.stats.snapshot()  # type: ignore[attr-defined]
    # Restores go through the same faulty proxy: reads are retried too.
    for version in range(5, 9):
        assert restored_state(proxied_s3.url, cfg, version) == sorted(history[version].items())
    requests = len(proxy.records)
    faults = proxy.injected()
    assert faults / requests > 0.15, (faults, requests)
    assert set(OPS) <= proxy.faulted_ops()
    assert {kind for kind, _ in MIXED_FAULTS} == {r.fault for r in proxy.records if r.fault}
    print(f"\n{requests} requests, {faults} faults injected; store's storage: {stats}")


def test_a_cut_multipart_upload_of_a_snapshot_sst_is_redone(proxied_s3, tmp_path) -> None:
    """An SST over 16 MiB goes up in 8 MiB parts. One part is dropped three times in a row
    (beyond botocore's retries) and the completion is applied but its answer lost; the storage
    layer uploads the file again. Nothing partial is ever visible and the snapshot restores."""
    proxy = proxied_s3.proxy
    cfg = _config(tmp_path, proxied_s3.options, backend="rocksdb", snapshot_interval=1)
    rng = random.Random(3)
    keys = [b"key-%06d" % i for i in range(17_500)]
    values = [rng.randbytes(1024) for _ in keys]  # incompressible: the SST stays ~18 MiB
    proxy.add("drop", ops={"UploadPart"}, limit=3)
    proxy.add("lose-reply", ops={"CompleteMultipartUpload"}, limit=1)
    with VersionedStore(proxied_s3.url, cfg) as store:
        store.load(0)
        store.put_many(keys, values)
        assert store.commit() == 1
        assert store.last_commit.snapshot_taken
    assert proxy.injected("drop", "UploadPart") == 3
    assert proxy.injected("lose-reply", "CompleteMultipartUpload") == 1
    assert proxied_s3.open_uploads() == []
    ssts = [k for k in proxied_s3.keys("state/shared/") if k.endswith(".sst")]
    big = [k for k in ssts if proxied_s3.client.head_object(Bucket=proxied_s3.bucket, Key=k)["ContentLength"] > 16 << 20]
    assert len(big) == 1, ssts  # the file did go up as a multipart upload (> 2 parts of 8 MiB)
    direct = _config(tmp_path / "fresh", proxied_s3.direct, backend="rocksdb")
    assert restored_state(proxied_s3.url, direct, 1) == sorted(zip(keys, values))


def test_permission_error_half_way_through_a_commit_never_exposes_a_partial_version(proxied_s3, tmp_path) -> None:
    proxy = proxied_s3.proxy
    cfg = _config(tmp_path, proxied_s3.options, backend="rocksdb", snapshot_interval=3)
    direct = _config(tmp_path / "fresh", proxied_s3.direct, backend="rocksdb", snapshot_interval=3)
    with VersionedStore(proxied_s3.url, cfg) as store:
        history = run_epochs(store, 5, keys=100, writes_per_epoch=40)
        # Version 6 takes a snapshot: changelog, several snapshot files, descriptor, manifest.
        # Writes are denied from the third on: the changelog and one snapshot file get in.
        proxy.add("deny", ops={"PutObject", "UploadPart", "CreateMultipartUpload"}, after=2)
        store.put(b"k-new", b"v6")
        assert store.commit_takes_snapshot()
        with pytest.raises(StorageError) as info:
            store.commit()
        message = str(info.value)
        for part in (f"S3 checkpoint storage {proxied_s3.url}", "AccessDenied (HTTP 403)", "was denied"):
            assert part in message, message
        assert re.search(rf"{re.escape(proxied_s3.url)}/(shared|snapshots)/6-\S+", message), message  # the file
        assert proxy.injected("deny") == 1  # failed at the first denial: not retried

        # Nothing of version 6 is committed; a fresh store sees exactly version 5.
        assert VersionedStore(proxied_s3.url, direct).versions() == [1, 2, 3, 4, 5]
        assert any(k.startswith("state/changelogs/6-") for k in proxied_s3.keys())  # the part that got in
        assert restored_state(proxied_s3.url, direct, 5) == sorted(history[5].items())

        # The failed commit left the local copy untrusted: the retry restores, then commits.
        proxy.clear()
        store.load(5)
        assert store.last_restore.mode == "restore"
        assert dict(store.iterate()) == history[5]
        store.put(b"k-new", b"v6")
        assert store.commit() == 6
    expected = {**history[5], b"k-new": b"v6"}
    assert restored_state(proxied_s3.url, direct, 6) == sorted(expected.items())
