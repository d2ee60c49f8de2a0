"""Directory walks through checkpoint storage (local disk, and S3 on a moto server): finding
process state beside a checkpoint and copying a state location between storages."""

from __future__ import annotations

import json

import pytest

from spark_state.ops.process_locations import CHECKPOINT, locations_beside
from spark_state.ops.storage_walk import copy_file, list_subdirs, remove_empty_dirs, walk_files
from spark_state.storage import open_storage

_META = json.dumps({"format": 1, "kind": "keyed", "max_parallelism": 128}).encode()


def _fill(storage) -> None:
    storage.write_bytes("metadata", b"{}")
    storage.write_bytes("spark-state/a/_operator.json", _META)
    storage.write_bytes("spark-state/a/stores/p2-b0/0/manifests/1.r1.json", b"m")
    storage.write_bytes("spark-state/a/stores/p2-b0/1/changelogs/1-x.changelog", b"c" * 1000)
    storage.write_bytes("spark-state/b/runs/1.json", b"not a state location: no _operator.json")


def _check(storage, url: str, options: dict) -> None:
    assert list_subdirs(storage) == ["spark-state"]
    assert list_subdirs(storage, "spark-state") == ["a", "b"]
    assert list_subdirs(storage, "nowhere") == []
    assert list(walk_files(storage.child("spark-state/a"))) == [
        "_operator.json", "stores/p2-b0/0/manifests/1.r1.json", "stores/p2-b0/1/changelogs/1-x.changelog"]
    [(name, loc)] = locations_beside(storage, options).items()
    assert name == "a" and loc.url == f"{url}/spark-state/a" and loc.placement == CHECKPOINT
    assert loc.kind == "keyed" and loc.max_parallelism == 128


def test_local_walk_copy_and_remove(tmp_path):
    storage = open_storage(str(tmp_path / "ck"))
    _fill(storage)
    _check(storage, str(tmp_path / "ck"), {})
    source, target = storage.child("spark-state/a"), open_storage(str(tmp_path / "copy"))
    for path in walk_files(source):
        copy_file(source, target, path)
    assert list(walk_files(target)) == list(walk_files(source))
    assert target.read_bytes("stores/p2-b0/1/changelogs/1-x.changelog") == b"c" * 1000
    source.delete_many(list(walk_files(source)))
    remove_empty_dirs(source)
    assert not (tmp_path / "ck" / "spark-state" / "a").exists()
    assert (tmp_path / "ck" / "spark-state" / "b" / "runs" / "1.json").is_file(), "other trees are kept"


@pytest.mark.s3
def test_s3_walk_and_copy_both_ways(s3_location, tmp_path):
    url, options = s3_location
    storage = open_storage(url, options)
    try:
        _fill(storage)
        _check(storage, url, options)
        local = open_storage(str(tmp_path / "local"))
        source = storage.child("spark-state/a")
        for path in walk_files(source):
            copy_file(source, local, path)  # S3 -> local
        back = storage.child("spark-state/c")
        for path in walk_files(local):
            copy_file(local, back, path)  # local -> S3
        assert list(walk_files(back)) == list(walk_files(source))
        assert back.read_bytes("stores/p2-b0/1/changelogs/1-x.changelog") == b"c" * 1000
        assert sorted(locations_beside(storage, options)) == ["a", "c"]
    finally:
        storage.close()
