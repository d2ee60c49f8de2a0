"""TTL's passes over a whole namespace in chunks: full-snapshot cleanup and layout migration give
the results of one pass, and hold one chunk at a time (the provider's full-snapshot cleanup in
chunks is tested with the provider, in test_provider_ttl_service.py).

The chunk size is forced small (``spark_state.ttl.kv.CHUNK_ROWS``, or the ``chunk`` argument) so
that stale and real index entries of one key, committed and staged entries, land in different
chunks."""

from __future__ import annotations

from typing import Iterator, Optional

import pytest
from pyspark.sql import types as T

from spark_state import EngineConfig, VersionedStore
from spark_state.keys import keyed as K
from spark_state.keys import system as syskeys
from spark_state.keys.system import keyed_record_key
from spark_state.state import KeyedStateBackend, ValueStateDescriptor
from spark_state.ttl import ManualClock, TtlConfig, TtlKeyValue, codec, kv as ttl_kv, migrate_layout

TTL_MS = 10_000
BUCKET_MS = codec.index_granularity(TTL_MS)
CHUNKS = [1, 2, 3, ttl_kv.CHUNK_ROWS]  # the last: one chunk, as one pass


def index_of(store: VersionedStore, ns: bytes) -> list[tuple[int, bytes]]:
    return [syskeys.decode_index_key(ns, k) for k, _ in store.prefix_scan(syskeys.index_prefix(ns))]


# ---------------------------------------------------------------------------- full-snapshot cleanup
@pytest.mark.parametrize("spill", [None, 600], ids=["in-memory", "spilling"])
@pytest.mark.parametrize("chunk", CHUNKS)
def test_keyed_full_snapshot_cleanup_in_chunks_removes_what_one_pass_removes(tmp_path, monkeypatch, chunk, spill):
    monkeypatch.setattr(ttl_kv, "CHUNK_ROWS", chunk)
    clock = ManualClock(1_000_000)
    # "spilling": the epoch's writes go to local disk, so staged entries are read back from the runs.
    limit = {} if spill is None else {"spill_threshold_bytes": spill}
    store = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(local_dir=str(tmp_path / "local"),
                                                                snapshot_interval=2, **limit)).load(0)
    b = KeyedStateBackend(store)
    cfg = TtlConfig.builder(TTL_MS).clock(clock).disable_cleanup_incrementally() \
        .disable_cleanup_in_background().cleanup_full_snapshot().build()
    v = b.get_state(ValueStateDescriptor("v", int, ttl=cfg))
    for i in range(10):
        b.set_current_key(b"k%d" % i, 0)
        v.update(i)
    b.before_commit()
    k0_key = K.entry_key(0, b"v", b"k0")
    assert store.get(k0_key) is not None
    # A stale entry of k0 in an older bucket: k0 is listed twice, in different chunks when small.
    store.put(syskeys.index_key(b"v", codec.bucket_start(clock.now_ms() - 5 * BUCKET_MS, BUCKET_MS), k0_key), b"")
    store.commit()                                  # version 1: changelog only
    clock.advance(TTL_MS)
    b.set_current_key(b"k21", 0)
    v.update(21)                                    # written this epoch, expired by its end: staged only
    clock.advance(TTL_MS)
    b.set_current_key(b"k3", 0)
    v.update(33)                                    # rewritten this epoch: survives
    b.set_current_key(b"k5", 0)
    v.clear()                                       # deleted by the epoch: not an expiry
    b.set_current_key(b"k20", 0)
    v.update(20)                                    # new: survives
    assert store.commit_takes_snapshot()
    assert b.before_commit() == 9                   # k0, k1, k2, k4, k6..k9 and k21: each once
    assert (store._overlay.spill is not None) == (spill is not None)
    store.commit()
    assert store.last_commit.snapshot_taken and store.num_keys() == 2
    live = [K.entry_key(0, b"v", b"k20"), K.entry_key(0, b"v", b"k3")]
    data = {k: codec.unstamp(v) for k, v in store.iterate(None, syskeys.SYSTEM_PREFIX)}
    assert sorted(data) == sorted(live)
    # No stale entry is left: the index holds the two live entries, stamped now.
    now_bucket = codec.bucket_start(clock.now_ms(), BUCKET_MS)
    assert sorted(index_of(store, b"v")) == sorted((now_bucket, k) for k in live)
    store.close()


def test_expire_all_reads_staged_entries_only_when_asked(tmp_path) -> None:
    """``pending=False`` (the provider's case) leaves an expired entry staged this epoch alone;
    ``pending=True`` removes it, with the committed ones, a chunk at a time."""
    store = VersionedStore(str(tmp_path)).load(0)
    kv = TtlKeyValue(store, b"", TtlConfig.builder(TTL_MS).build())
    kv.stage_raw_changes([b"a", b"b", b"c"], [b"1", b"2", b"3"], None, now=1_000)
    store.commit()
    kv.stage_raw_changes([b"d", b"e"], [b"4", b"5"], None, now=1_000)   # staged, not committed
    now = 1_000 + TTL_MS
    assert kv.expire_all(now, pending=False, chunk=1) == 3
    assert kv.expire_all(now, pending=True, chunk=1) == 2
    store.commit()
    assert list(store) == [] and store.num_keys() == 0


# ---------------------------------------------------------------------------- layout migration
class CountingEntries:
    """The namespace's committed entries from ``start`` on, counting the rows handed out and
    checking, at each, how many of those are not yet staged (what the migration holds)."""

    def __init__(self, store: VersionedStore) -> None:
        self.store = store
        self.handed_out = 0
        self.most_held = 0

    def __call__(self, start: Optional[bytes]) -> Iterator[tuple[bytes, bytes]]:
        for row in self.store.iterate_committed(start, syskeys.SYSTEM_PREFIX):
            staged = sum(1 for k, _ in self.store.iterate_pending(None, syskeys.SYSTEM_PREFIX))
            self.most_held = max(self.most_held, self.handed_out - staged)
            self.handed_out += 1
            yield row


@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_migration_in_chunks_gives_the_contents_of_one_pass_and_holds_one_chunk(tmp_path, backend) -> None:
    store = VersionedStore(str(tmp_path), EngineConfig(backend=backend, local_dir=str(tmp_path / "local"))).load(0)
    rows = {b"k%02d" % i: b"v%d" % i for i in range(10)}
    store.put_many(list(rows), list(rows.values()))
    store.commit()
    now, chunk = 123_456, 3
    bucket = codec.bucket_start(now, BUCKET_MS)

    entries = CountingEntries(store)
    assert migrate_layout(store, b"", True, entries, now, TTL_MS, chunk=chunk) == 10
    assert entries.handed_out == 10 and entries.most_held <= chunk
    store.commit()
    stamped = {k: codec.stamp(v, now) for k, v in rows.items()}
    index = {syskeys.index_key(b"", bucket, k): b"" for k in rows}
    assert dict(store) == {**stamped, **index, syskeys.marker_key(b""): codec.STAMPED_MARKER}
    assert store.num_keys() == 10

    # Off again; an index entry of another bucket width (a TTL change) is dropped as well.
    stale = syskeys.index_key(b"", 0, b"k03")
    store.put(stale, b"")
    store.commit()
    entries = CountingEntries(store)
    assert migrate_layout(store, b"", False, entries, now + 1, chunk=chunk) == 10
    assert entries.handed_out == 10 and entries.most_held <= chunk
    store.commit()
    assert dict(store) == rows and store.num_keys() == 10
    store.close()


def test_keyed_migration_in_chunks_keeps_values(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ttl_kv, "CHUNK_ROWS", 2)
    clock = ManualClock(5_000_000)
    config = EngineConfig(local_dir=str(tmp_path / "local"))
    store = VersionedStore(str(tmp_path / "ckpt"), config).load(0)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", int))
    other = b.get_state(ValueStateDescriptor("other", int))      # another state's entries are interleaved
    for i in range(7):
        b.set_current_key(b"k%d" % i, i % 3)
        v.update(i)
        other.update(-i)
    b.before_commit()
    store.commit()
    plain = dict(store)
    store.close()

    cfg = TtlConfig.builder(TTL_MS).clock(clock).build()
    store = VersionedStore(str(tmp_path / "ckpt"), config).load(1)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=cfg))     # TTL on: 7 entries, 4 chunks
    b.before_commit()
    store.commit()
    stamped = dict(store)
    v_index = [k for k in stamped if k.startswith(syskeys.index_prefix(b"v"))]
    assert len(v_index) == 7
    v_keys = {syskeys.decode_index_key(b"v", k)[1] for k in v_index}
    assert v_keys == {K.entry_key(i % 3, b"v", b"k%d" % i) for i in range(7)}
    now = clock.now_ms()
    assert {k: stamped[k] for k in v_keys} == {k: codec.stamp(plain[k], now) for k in v_keys}
    # Everything else is as it was: the other state's entries, and its schema record (v's records its TTL).
    unchanged = [k for k in plain if k not in v_keys and k != keyed_record_key(b"v")]
    assert {k: stamped[k] for k in unchanged} == {k: plain[k] for k in unchanged}
    for i in range(7):
        b.set_current_key(b"k%d" % i, i % 3)
        assert v.value() == i
    store.close()

    store = VersionedStore(str(tmp_path / "ckpt"), config).load(2)
    b = KeyedStateBackend(store)
    b.get_state(ValueStateDescriptor("v", int))                  # TTL off: back to the plain contents
    b.before_commit()
    store.commit()
    assert dict(store) == plain
    store.close()


def test_keyed_migration_in_chunks_stamps_the_values_a_schema_migration_rewrote(tmp_path, monkeypatch) -> None:
    """A type change and TTL turned on at one registration: the schema migration stages the
    rewritten values first, so the TTL migration must read them (the merged view), chunk after
    chunk; the loaded version would give the old encoding."""
    monkeypatch.setattr(ttl_kv, "CHUNK_ROWS", 2)
    clock = ManualClock(5_000)
    config = EngineConfig(local_dir=str(tmp_path / "local"))
    store = VersionedStore(str(tmp_path / "ckpt"), config).load(0)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", T.LongType()))
    for i in range(7):
        b.set_current_key(b"k%d" % i, i % 3)
        v.update(10 * i)
    b.before_commit()
    store.commit()
    store.close()

    store = VersionedStore(str(tmp_path / "ckpt"), config).load(1)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", T.DoubleType(), ttl=TtlConfig.builder(TTL_MS).clock(clock).build()))
    b.before_commit()
    store.commit()
    assert len(index_of(store, b"v")) == 7
    assert {codec.stamp_of(raw) for k, raw in store.iterate(None, syskeys.SYSTEM_PREFIX)} == {5_000}
    store.close()
    store = VersionedStore(str(tmp_path / "ckpt"), config).load(2)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", T.DoubleType(), ttl=TtlConfig.builder(TTL_MS).clock(clock).build()))
    for i in range(7):
        b.set_current_key(b"k%d" % i, i % 3)
        assert v.value() == 10.0 * i
    store.close()
