"""An epoch committed whole as Arrow columns (``VersionedStore.commit_writes``, the provider's
path without TTL) leaves the same versions as the same writes staged key by key: state, exact key
count, changelog, and what a restore from checkpoint storage rebuilds. Independent model: a dict."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from spark_state import EngineConfig, StoreStateError, VersionedStore
from spark_state.checkpoint import changelog
from spark_state.keys.system import SYSTEM_PREFIX as SYSTEM_KEY_PREFIX
from spark_state.engine.epoch_writes import ArrowWrites
from spark_state.provider.ttl_commit import OP_TOUCH, commit_epoch, read_changes_table
from spark_state.provider.ttl_policy import StoreTtl

BACKENDS = ["rocksdb", "hashmap"]


def _column(values, type_=pa.binary()) -> pa.ChunkedArray:
    # Two chunks, as the shim's files may have several record batches.
    half = len(values) // 2
    return pa.chunked_array([pa.array(values[:half], type_), pa.array(values[half:], type_)], type_)


def _epoch(rng: random.Random, model: dict[bytes, bytes], key_space: int) -> tuple[list, list, list]:
    """One epoch's last write per key, with existence flags as the JVM reports them: known
    (1/0), unknown (-1) or missing (null)."""
    keys = sorted(rng.sample(range(key_space), rng.randint(0, key_space // 2)))
    out_keys, values, existed = [], [], []
    for k in keys:
        key = k.to_bytes(4, "big")
        out_keys.append(key)
        values.append(None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 12)))
        flag = 1 if key in model else 0
        existed.append(rng.choice([flag, flag, -1, None]))
    return out_keys, values, existed


@pytest.mark.parametrize("backend", BACKENDS)
def test_whole_epochs_commit_like_staged_writes(tmp_path, backend):
    config = EngineConfig(backend=backend, snapshot_interval=3, local_dir=str(tmp_path / "local"))
    rng = random.Random(7)
    model: dict[bytes, bytes] = {}
    with VersionedStore(str(tmp_path / "whole"), config) as whole, \
            VersionedStore(str(tmp_path / "staged"), config) as staged:
        whole.load(0)
        staged.load(0)
        for epoch in range(1, 9):
            keys, values, existed = _epoch(rng, model, 200)
            writes = ArrowWrites.of(_column(keys), _column(values), _column(existed, pa.int8()))
            assert writes is not None
            assert whole.commit_writes(writes) == epoch
            for key, value in zip(keys, values):
                if value is None:
                    staged.delete(key)
                else:
                    staged.put(key, value)
            assert staged.commit() == epoch
            for key, value in zip(keys, values):
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
            assert dict(whole.iterate()) == model == dict(staged.iterate())
            assert whole.num_keys() == len(model) == staged.num_keys()
            assert (whole.last_commit.num_updates, whole.last_commit.num_deletes) == \
                (staged.last_commit.num_updates, staged.last_commit.num_deletes) == \
                (sum(v is not None for v in values), sum(v is None for v in values))
            ref = whole.manifest.changelog
            data = whole.storage.read_bytes(ref.path)
            assert list(changelog.decode(data, ref.path, epoch)) == list(zip(keys, values))
    with VersionedStore(str(tmp_path / "whole"), config) as restored:
        restored.load(8)
        assert restored.last_restore.mode == "restore"
        assert dict(restored.iterate()) == model and restored.num_keys() == len(model)


def test_an_empty_epoch_commits_an_empty_changelog(tmp_path):
    with VersionedStore(str(tmp_path / "ckpt"), EngineConfig(local_dir=str(tmp_path / "l"))) as store:
        store.load(0)
        writes = ArrowWrites.of(_column([]), _column([]))
        assert writes is not None and store.commit_writes(writes) == 1
        assert store.num_keys() == 0 and list(store.iterate()) == []


def test_rows_the_whole_form_does_not_take_are_left_to_the_overlay():
    # A key written twice (the last write must win) or a system key: the caller stages them instead.
    assert ArrowWrites.of(_column([b"a", b"b", b"a"]), _column([b"1", b"2", b"3"])) is None
    assert ArrowWrites.of(_column([b"a", SYSTEM_KEY_PREFIX + b"x"]), _column([b"1", b"2"])) is None
    with pytest.raises(ValueError, match="null keys"):
        ArrowWrites.of(_column([b"a", None]), _column([b"1", b"2"]))
    with pytest.raises(ValueError, match="different lengths"):
        ArrowWrites.of(_column([b"a", b"b"]), _column([b"1"]))


def test_a_whole_epoch_cannot_be_committed_over_staged_writes(tmp_path):
    with VersionedStore(str(tmp_path / "ckpt"), EngineConfig(local_dir=str(tmp_path / "l"))) as store:
        store.load(0)
        store.put(b"a", b"1")
        writes = ArrowWrites.of(_column([b"b"]), _column([b"2"]))
        assert writes is not None
        with pytest.raises(StoreStateError, match="1 writes are staged already"):
            store.commit_writes(writes)
        assert store.commit() == 1 and dict(store.iterate()) == {b"a": b"1"}


def _changes_file(path, rows) -> str:
    schema = pa.schema([("op", pa.int8()), ("key", pa.binary()), ("value", pa.binary()),
                        ("prior", pa.int8()), ("prior_stamp", pa.int64())])
    columns = list(zip(*rows)) if rows else [[], [], [], [], []]
    table = pa.table([pa.array(list(c), t.type) for c, t in zip(columns, schema)], schema=schema)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table)
    return str(path)


@pytest.mark.parametrize("duplicate", [False, True])
def test_provider_epochs_without_ttl_commit_whole_or_staged_alike(tmp_path, duplicate):
    """The provider's commit without TTL: whole when it can, staged when a key repeats or a touch
    row came along (touches only mean something with TTL: dropped)."""
    ttl = StoreTtl(None)
    with VersionedStore(str(tmp_path / "ckpt"), EngineConfig(local_dir=str(tmp_path / "l"))) as store:
        store.load(0)
        rows = [(0, b"a", b"1", 0, -1), (0, b"b", b"2", -1, -1), (OP_TOUCH, b"c", b"3", 1, -1)]
        if duplicate:
            rows.append((1, b"a", None, 0, -1))
        table = read_changes_table(_changes_file(tmp_path / "changes.arrow", rows))
        commit_epoch(store, ttl, table, now=0)
        expected = {b"b": b"2"} if duplicate else {b"a": b"1", b"b": b"2"}
        assert store.version == 1 and dict(store.iterate()) == expected and store.num_keys() == len(expected)
        rows = [(1, b"b", None, 1, -1), (0, b"d", b"4", 0, -1)]
        commit_epoch(store, ttl, read_changes_table(_changes_file(tmp_path / "changes2.arrow", rows)), now=0)
        expected.pop(b"b")
        expected[b"d"] = b"4"
        assert dict(store.iterate()) == expected and store.num_keys() == len(expected)
