"""TtlKeyValue, the decorator the Spark provider uses: batches of unstamped writes with
known or unknown prior stamps, touches, stale index entries after a TTL change."""

from __future__ import annotations

from spark_state import VersionedStore
from spark_state.keys import system as syskeys
from spark_state.ttl import PRIOR_ABSENT, PRIOR_UNKNOWN, ManualClock, TtlConfig, TtlKeyValue, codec, migrate_layout

TTL = 16_000          # index buckets of 1 s
BUCKET = codec.index_granularity(TTL)


def index(store: VersionedStore, ns: bytes = b"") -> list[tuple[int, bytes]]:
    return [syskeys.decode_index_key(ns, k) for k, _ in store.prefix_scan(syskeys.index_prefix(ns))]


def data(store: VersionedStore) -> dict[bytes, tuple[int, bytes]]:
    return {k: codec.unstamp(v) for k, v in store.iterate(None, syskeys.SYSTEM_PREFIX)}


def test_stage_raw_changes_stamps_and_indexes(tmp_path) -> None:
    store = VersionedStore(str(tmp_path)).load(0)
    kv = TtlKeyValue(store, b"", TtlConfig.builder(TTL).build())
    kv.stage_raw_changes([b"a", b"b"], [b"1", b"2"], [PRIOR_ABSENT, PRIOR_UNKNOWN], now=10_500)
    store.commit()
    assert data(store) == {b"a": (10_500, b"1"), b"b": (10_500, b"2")}
    assert index(store) == [(10_000, b"a"), (10_000, b"b")]
    assert store.num_keys() == 2
    # Same bucket: values restamped, index untouched. Known and unknown priors alike.
    kv.stage_raw_changes([b"a", b"b"], [b"1x", b"2x"], [10_500, PRIOR_UNKNOWN], now=10_900)
    store.commit()
    assert data(store) == {b"a": (10_900, b"1x"), b"b": (10_900, b"2x")}
    assert index(store) == [(10_000, b"a"), (10_000, b"b")]
    assert store.last_commit.num_updates == 2          # no index writes at all
    # Later bucket: the index entry moves; a delete removes data and index entry.
    kv.stage_raw_changes([b"a", b"b"], [b"1y", None], [PRIOR_UNKNOWN, 10_900], now=12_100)
    store.commit()
    assert data(store) == {b"a": (12_100, b"1y")}
    assert index(store) == [(12_000, b"a")]
    assert store.num_keys() == 1


def test_touch_refreshes_live_keys_only(tmp_path) -> None:
    store = VersionedStore(str(tmp_path)).load(0)
    kv = TtlKeyValue(store, b"", TtlConfig.builder(TTL).update_type("OnReadAndWrite").build())
    kv.stage_raw_changes([b"a", b"b"], [b"1", b"2"], None, now=1_000)
    store.commit()
    assert kv.touch([b"a", b"b"], now=1_000 + TTL) == 0    # both expired at 17 s: not revived
    store.abort()
    assert kv.touch([b"a", b"zz"], now=9_000) == 1         # live a refreshed, absent zz ignored
    store.commit()
    assert data(store)[b"a"] == (9_000, b"1") and data(store)[b"b"] == (1_000, b"2")
    assert index(store) == [(1_000, b"b"), (9_000, b"a")]


def test_sweep_tolerates_stale_index_entries_after_a_ttl_change(tmp_path) -> None:
    store = VersionedStore(str(tmp_path)).load(0)
    old = TtlKeyValue(store, b"", TtlConfig.builder(TTL).build())          # buckets of 1 s
    old.stage_raw_changes([b"a", b"b"], [b"1", b"2"], None, now=5_300)
    store.commit()
    new = TtlKeyValue(store, b"", TtlConfig.builder(TTL * 4).build())      # buckets of 4 s
    new.stage_raw_changes([b"a"], [b"1x"], [5_300], now=9_000)             # moves a to bucket 8 s
    store.commit()
    assert index(store) == [(5_000, b"a"), (5_000, b"b"), (8_000, b"a")]   # (5 s, a) is stale
    # b expired at 69.3 s, but its 1 s bucket [5, 6) is read as a 4 s bucket [5, 9): swept
    # once that has wholly expired (cutoff 9 s, now 73 s) -- late, never early.
    assert new.sweep(now=72_998) == 0
    assert new.sweep(now=72_999) == 1                                       # b removed, (5 s, a) dropped
    store.commit()
    assert data(store) == {b"a": (9_000, b"1x")} and index(store) == [(8_000, b"a")]
    assert new.sweep(now=75_999) == 1
    store.commit()
    assert data(store) == {} and index(store) == [] and store.num_keys() == 0


def test_migration_on_and_off_keeps_values(tmp_path) -> None:
    store = VersionedStore(str(tmp_path)).load(0)
    store.put_many([b"a", b"b"], [b"1", b"2"])
    store.commit()
    entries = lambda start: store.iterate_committed(start, syskeys.SYSTEM_PREFIX)  # noqa: E731
    assert migrate_layout(store, b"", True, entries, now=7_777, ttl_ms=TTL) == 2
    store.commit()
    assert data(store) == {b"a": (7_777, b"1"), b"b": (7_777, b"2")} and len(index(store)) == 2
    assert migrate_layout(store, b"", True, entries, now=8_000, ttl_ms=TTL) == 0   # already stamped
    assert migrate_layout(store, b"", False, entries, now=8_000) == 2
    store.commit()
    assert list(store) == [(b"a", b"1"), (b"b", b"2")]


def test_a_key_listed_twice_by_stale_index_entries_expires_once(tmp_path) -> None:
    store = VersionedStore(str(tmp_path)).load(0)
    kv = TtlKeyValue(store, b"", TtlConfig.builder(TTL).build())
    kv.stage_raw_changes([b"a"], [b"1"], [PRIOR_ABSENT], now=1_200)
    store.commit()
    kv.stage_raw_changes([b"a"], [b"2"], [PRIOR_UNKNOWN], now=2_100)   # moves a to bucket 2 s
    store.put(syskeys.index_key(b"", 1_000, b"a"), b"")                  # a stale entry left behind
    store.commit()
    assert index(store) == [(1_000, b"a"), (2_000, b"a")]
    assert kv.sweep(now=2_100 + TTL + BUCKET) == 1
    store.commit()
    assert index(store) == [] and data(store) == {} and kv.stats.expired_by_sweep == 1
