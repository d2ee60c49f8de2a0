"""TTL on keyed state with an injected clock: update types, visibility, every cleanup
strategy, per-element and per-entry expiry, restarts with another TTL, migrations."""

from __future__ import annotations

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.state import (
    KeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from spark_state.keys import system as syskeys
from spark_state.keys.system import keyed_record_key
from spark_state.state.schema import schema_of
from spark_state.ttl import ManualClock, TtlConfig, UpdateType, codec

TTL_MS = 10_000
#: Index bucket width: sweeps take a bucket once all of it has expired.
BUCKET_MS = codec.index_granularity(TTL_MS)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


@pytest.fixture(params=["rocksdb", "hashmap"])
def backend_name(request) -> str:
    return request.param


def open_store(tmp_path, backend: str = "rocksdb", version: int = 0, **config) -> VersionedStore:
    store = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(backend=backend, local_dir=str(tmp_path / "local"), **config))
    return store.load(version)


def ttl(clock: ManualClock, **options) -> TtlConfig:
    builder = TtlConfig.builder(TTL_MS).clock(clock)
    for name, arg in options.items():
        getattr(builder, name)(*([] if arg is True else [arg]))
    return builder.build()


def index_entries(store: VersionedStore) -> list[bytes]:
    return [k for k, _ in store.iterate(*syskeys.tag_range(syskeys.TTL_INDEX_TAG))]


def test_on_create_and_write_reads_do_not_extend_life(tmp_path, clock, backend_name) -> None:
    store = open_store(tmp_path, backend_name)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=ttl(clock)))
    b.set_current_key(b"k", 1)
    v.update(1)
    clock.advance(TTL_MS - 1)
    assert v.value() == 1          # still alive one ms before expiry; this read does not refresh
    clock.advance(1)
    assert v.value() is None       # expired exactly at last write + ttl
    v.update(2)                    # a write starts a new life
    clock.advance(TTL_MS - 1)
    assert v.value() == 2


def test_on_read_and_write_reads_extend_life(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=ttl(clock, update_type=UpdateType.ON_READ_AND_WRITE)))
    b.set_current_key(b"k", 1)
    v.update(1)
    for _ in range(5):
        clock.advance(TTL_MS - 1)
        assert v.value() == 1      # every read refreshes
    clock.advance(TTL_MS)
    assert v.value() is None


def test_disabled_update_type_means_no_ttl(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    off = TtlConfig.builder(TTL_MS).update_type("Disabled").clock(clock).build()
    v = b.get_state(ValueStateDescriptor("v", int, ttl=off))
    b.set_current_key(b"k", 1)
    v.update(1)
    clock.advance(100 * TTL_MS)
    assert v.value() == 1 and index_entries(store) == []
    assert store.get(b"".join([b"\x00\x01", b"\x01v", b"\x00\x00\x00\x01k"])) == (1).to_bytes(8, "big")


def test_never_return_expired_vs_return_expired_if_not_cleaned_up(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    never = b.get_state(ValueStateDescriptor("never", int, ttl=ttl(clock)))
    lax = b.get_state(ValueStateDescriptor("lax", int, ttl=ttl(clock, return_expired_if_not_cleaned_up=True)))
    b.set_current_key(b"k", 1)
    never.update(1)
    lax.update(2)
    store.commit()
    clock.advance(TTL_MS)
    assert never.value() is None
    assert lax.value() == 2        # expired but still there: returned once ...
    assert lax.value() is None     # ... and cleaned up by that read, as in Flink
    assert b.ttl_stats.expired_on_read == 2


def test_list_elements_expire_one_by_one(tmp_path, clock, backend_name) -> None:
    store = open_store(tmp_path, backend_name)
    b = KeyedStateBackend(store)
    events = b.get_list_state(ListStateDescriptor("events", str, ttl=ttl(clock)))
    b.set_current_key(b"k", 5)
    events.add("a")
    clock.advance(4000)
    events.add_all(["b", "c"])
    store.commit()
    clock.advance(4000)
    events.add("d")
    assert events.get() == ["a", "b", "c", "d"]
    clock.advance(2000)            # "a" is 10 s old
    assert events.get() == ["b", "c", "d"]
    clock.advance(4000)            # "b", "c" are 10 s old
    assert events.get() == ["d"]
    events.add("e")                # appends after the survivors
    assert events.get() == ["d", "e"]
    clock.advance(TTL_MS)
    assert events.get() == []
    store.commit()
    assert store.num_keys() == 0 and index_entries(store) == []


def test_map_entries_expire_one_by_one(tmp_path, clock, backend_name) -> None:
    store = open_store(tmp_path, backend_name)
    b = KeyedStateBackend(store)
    m = b.get_map_state(MapStateDescriptor("m", str, int, ttl=ttl(clock)))
    b.set_current_key(b"k", 5)
    m.put("old", 1)
    clock.advance(6000)
    m.put("new", 2)
    clock.advance(4000)
    assert m.items() == [("new", 2)] and m.get("old") is None and m.contains("new")
    clock.advance(6000)
    assert m.is_empty()


def test_map_entry_rewrite_refreshes_only_that_entry(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    m = b.get_map_state(MapStateDescriptor("m", str, int, ttl=ttl(clock)))
    b.set_current_key(b"k", 5)
    m.put_all({"a": 1, "b": 2})
    assert len(index_entries(store)) == 2
    clock.advance(BUCKET_MS // 3)
    m.put("b", 3)                               # same index bucket: no index write
    assert len(index_entries(store)) == 2
    clock.advance(6000)
    m.put("a", 10)                              # a later bucket: the index entry moves
    assert len(index_entries(store)) == 2
    clock.advance(5000)
    assert m.items() == [("a", 10)]
    assert len(index_entries(store)) == 1       # "b" was cleaned on read, with its index entry


def test_reducing_state_ttl(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    total = b.get_reducing_state(ReducingStateDescriptor("t", lambda x, y: x + y, int, ttl=ttl(clock)))
    b.set_current_key(b"k", 5)
    total.add(1)
    total.add(2)
    clock.advance(TTL_MS)
    assert total.get() is None
    total.add(5)
    assert total.get() == 5


def test_incremental_sweep_is_bounded_and_follows_expirations(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=ttl(clock, cleanup_incrementally=30, disable_cleanup_in_background=True)))
    for i in range(100):                       # these will expire
        b.set_current_key(b"old%d" % i, i % 16)
        v.update(i)
    clock.advance(TTL_MS // 2)
    for i in range(2000):                      # these stay alive
        b.set_current_key(b"new%d" % i, i % 16)
        v.update(i)
    store.commit()
    clock.advance(TTL_MS // 2 + BUCKET_MS)
    visited = []
    real_iterate = store.iterate

    def spying_iterate(start=None, end=None):
        for item in real_iterate(start, end):
            visited.append(item[0])
            yield item
    store.iterate = spying_iterate             # count what the sweep reads
    removed = [b.before_commit()]
    assert removed == [30] and len(visited) == 30   # reads 30 index entries, not 2100 values
    store.commit()
    del store.iterate
    while removed[-1]:
        removed.append(b.before_commit())
        store.commit()
    assert removed == [30, 30, 30, 10, 0]
    assert store.num_keys() == 2000 and len(index_entries(store)) == 2000
    assert b.ttl_stats.expired_by_sweep == 100


def test_full_snapshot_cleanup_removes_everything_expired_before_a_snapshot(tmp_path, clock) -> None:
    store = open_store(tmp_path, snapshot_interval=2)
    b = KeyedStateBackend(store)
    cfg = ttl(clock, cleanup_incrementally=1, cleanup_full_snapshot=True, disable_cleanup_in_background=True)
    desc = ValueStateDescriptor("v", int, ttl=cfg)
    v = b.get_state(desc)
    for i in range(50):
        b.set_current_key(b"k%d" % i, 0)
        v.update(i)
    assert not store.commit_takes_snapshot()
    b.before_commit()
    store.commit()                              # version 1: changelog only
    clock.advance(TTL_MS)
    assert store.commit_takes_snapshot()
    assert b.before_commit() == 50              # not just 1: this commit snapshots
    store.commit()
    assert store.last_commit.snapshot_taken and store.num_keys() == 0
    store.close()
    restored = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(local_dir=str(tmp_path / "other")))
    restored.load(2)
    # the snapshot holds no expired entry: only the TTL marker and the schema record remain
    assert list(restored) == [(syskeys.marker_key(b"v"), codec.STAMPED_MARKER),
                              (keyed_record_key(b"v"), schema_of(desc).encode())]
    restored.close()


def test_background_cleanup_collects_now_and_removes_at_commit(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    cfg = ttl(clock, disable_cleanup_incrementally=True)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=cfg))
    for i in range(10):
        b.set_current_key(b"k%d" % i, 0)
        v.update(i)
    store.commit()
    clock.advance(TTL_MS + BUCKET_MS)
    assert b.before_commit() == 0               # no incremental sweep configured
    b.collect_expired_in_background()
    b.set_current_key(b"k3", 0)
    v.update(33)                                # rewritten after collection: must survive
    assert b.before_commit() == 9
    store.commit()
    assert store.num_keys() == 1 and v.value() == 33


def test_restart_with_a_different_ttl_applies_the_new_one(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=ttl(clock)))
    b.set_current_key(b"k", 0)
    v.update(7)
    store.commit()
    store.close()
    clock.advance(15_000)                       # older than 10 s, younger than 60 s
    for ttl_ms, expected in [(60_000, 7), (10_000, None)]:
        again = open_store(tmp_path, version=1)
        b2 = KeyedStateBackend(again)
        v = b2.get_state(ValueStateDescriptor("v", int, ttl=TtlConfig.builder(ttl_ms).clock(clock).build()))
        b2.set_current_key(b"k", 0)
        assert v.value() == expected
        again.close()


def test_turning_ttl_on_and_off_migrates_existing_state(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    lst = b.get_list_state(ListStateDescriptor("l", int))
    for i in range(5):
        b.set_current_key(b"k%d" % i, i)
        lst.add_all([i, i + 1])
    store.commit()
    store.close()
    # TTL on: values are kept, stamped with the migration time, and expire TTL later.
    store = open_store(tmp_path, version=1)
    b = KeyedStateBackend(store)
    lst = b.get_list_state(ListStateDescriptor("l", int, ttl=ttl(clock)))
    b.set_current_key(b"k2", 2)
    assert lst.get() == [2, 3]
    store.commit()
    assert store.num_keys() == 15 and len(index_entries(store)) == 15
    store.close()
    clock.advance(TTL_MS - 1)
    # TTL off again: stamps stripped, index dropped, values intact.
    store = open_store(tmp_path, version=2)
    b = KeyedStateBackend(store)
    lst = b.get_list_state(ListStateDescriptor("l", int))
    b.set_current_key(b"k4", 4)
    assert lst.get() == [4, 5]
    store.commit()
    assert index_entries(store) == [] and store.num_keys() == 15
    clock.advance(100 * TTL_MS)
    assert lst.get() == [4, 5]


def test_ttl_state_restores_exactly_and_keeps_expiring(tmp_path, clock) -> None:
    store = open_store(tmp_path)
    b = KeyedStateBackend(store)
    m = b.get_map_state(MapStateDescriptor("m", int, int, ttl=ttl(clock)))
    b.set_current_key(b"k", 1)
    for i in range(10):
        m.put(i, i)
        clock.advance(1000)
    store.commit()
    before = list(store)
    store.close()
    restored = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(local_dir=str(tmp_path / "elsewhere"))).load(1)
    assert list(restored) == before
    b2 = KeyedStateBackend(restored)
    m2 = b2.get_map_state(MapStateDescriptor("m", int, int, ttl=ttl(clock)))
    b2.set_current_key(b"k", 1)
    clock.advance(500)                          # entries written at +0..+9 s, now +10.5 s
    assert m2.keys() == list(range(1, 10))
    restored.close()
