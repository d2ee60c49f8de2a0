"""Unit tests for spark_state.keys: every stored key's bytes -- round trips, ordering
invariants, bounds and the keyspace plan (pure Python, no Spark)."""

from __future__ import annotations

import bisect
import copy
import pickle
import random
import struct

import pyarrow as pa
import pytest

from hash_samples import INT_MAX, INT_MIN, random_hashes
from spark_state.keys import keyed as K
from spark_state.keys import operator as O
from spark_state.keys import system as S
from spark_state.keys import timers as T
from spark_state.keys.keygroup_prefix import (
    KEY_GROUP_KEYSPACE_END,
    KEY_GROUP_LIMIT,
    KEY_GROUP_PREFIX_BYTES,
    KEY_SPACE_END,
    encode_key_group,
    key_group_bounds,
    key_group_of,
    prefix_key,
    strip_key_group,
)
from spark_state.keys.provider import (
    HEADER_BYTES,
    MAX_PARALLELISM,
    MalformedProviderKeyError,
    provider_key,
    route_hashes,
    split_provider_key,
)
from spark_state.partitioning.keygroups import KeyGroupRange
from spark_state.partitioning.spark_hash import spark_key_group, spark_partition_id

# ---------------------------------------------------------------------------------------
# The key-group prefix (keys/keygroup_prefix.py)
# ---------------------------------------------------------------------------------------


def test_encode_key_group_is_two_byte_big_endian() -> None:
    assert KEY_GROUP_PREFIX_BYTES == 2
    assert encode_key_group(0) == b"\x00\x00"
    assert encode_key_group(258) == b"\x01\x02"
    assert encode_key_group(32767) == b"\x7f\xff"
    assert encode_key_group(65535) == b"\xff\xff"
    for bad in (-1, 65536):
        with pytest.raises(ValueError, match=f"key group {bad} cannot be encoded"):
            encode_key_group(bad)


def test_prefix_key_round_trip() -> None:
    rng = random.Random(3)
    for kg in (0, 1, 255, 256, 32767, 65535):
        for key in (b"", b"\x00", b"\xff" * 9, bytes(rng.randrange(256) for _ in range(17))):
            stored = prefix_key(kg, key)
            assert stored == struct.pack(">H", kg) + key
            assert key_group_of(stored) == kg
            assert strip_key_group(stored) == key


def test_short_stored_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="1 bytes, shorter than the 2-byte"):
        key_group_of(b"\x01")
    with pytest.raises(ValueError, match="shorter than the 2-byte"):
        strip_key_group(b"")
    with pytest.raises(ValueError, match="5 bytes, shorter than the 6-byte"):
        split_provider_key(b"\x00" * 5)


def _sample_stored_keys() -> list[bytes]:
    rng = random.Random(11)
    user_keys = [b"", b"\x00", b"\xff", b"\xff" * 40, b"abc"] + [
        bytes(rng.randrange(256) for _ in range(rng.randrange(12))) for _ in range(5)
    ]
    kgs = sorted({0, 1, 2, 41, 42, 43, 85, 86, 127, 128, 255, 256, 32767, 32768, 65534, 65535})
    return [prefix_key(kg, key) for kg in kgs for key in user_keys]


def test_keys_of_a_key_group_sort_before_the_next_group() -> None:
    stored = _sample_stored_keys()
    random.Random(5).shuffle(stored)
    groups_in_order = [key_group_of(k) for k in sorted(stored)]
    assert groups_in_order == sorted(groups_in_order)
    for kg in (0, 255, 32767, 65534):
        assert prefix_key(kg, b"\xff" * 100) < prefix_key(kg + 1, b"")


@pytest.mark.parametrize(
    "key_group_range",
    [
        KeyGroupRange(0, 42),
        KeyGroupRange(43, 85),
        KeyGroupRange(86, 127),
        KeyGroupRange(42, 42),
        KeyGroupRange(255, 256),
        KeyGroupRange(0, 32767),
        KeyGroupRange(32767, 32767),
        KeyGroupRange(65534, 65535),
        KeyGroupRange(65535, 65535),
        KeyGroupRange(0, 65535),
        KeyGroupRange.EMPTY,
    ],
)
def test_key_group_bounds_contain_exactly_their_groups(key_group_range: KeyGroupRange) -> None:
    lower, upper = key_group_bounds(key_group_range)
    stored = sorted(_sample_stored_keys())
    for k in stored:
        assert (lower <= k < upper) == (key_group_of(k) in key_group_range), (k, key_group_range)
    # the same bounds slice a sorted key list (bisect), as a range scan would
    sliced = stored[bisect.bisect_left(stored, lower) : bisect.bisect_left(stored, upper)]
    assert sliced == [k for k in stored if key_group_of(k) in key_group_range]


def test_key_group_bounds_values() -> None:
    assert key_group_bounds(KeyGroupRange(0, 42)) == (b"\x00\x00", b"\x00\x2b")
    assert key_group_bounds(KeyGroupRange(86, 127)) == (b"\x00\x56", b"\x00\x80")
    assert key_group_bounds(KeyGroupRange(0, 32767)) == (b"\x00\x00", b"\x80\x00")
    lower, upper = key_group_bounds(KeyGroupRange(65535, 65535))
    assert lower == b"\xff\xff" and upper is KEY_SPACE_END
    with pytest.raises(ValueError, match="65536"):
        key_group_bounds(KeyGroupRange(65535, 65536))


def test_key_space_end_sorts_after_every_key() -> None:
    assert isinstance(KEY_SPACE_END, bytes)
    for k in (b"", b"\xff\xff", b"\xff\xff\xff", b"\xff" * 1000):
        assert k < KEY_SPACE_END and k <= KEY_SPACE_END and not k >= KEY_SPACE_END
        assert KEY_SPACE_END > k and not KEY_SPACE_END < k and KEY_SPACE_END != k
    assert KEY_SPACE_END == KEY_SPACE_END and KEY_SPACE_END <= KEY_SPACE_END
    assert sorted([KEY_SPACE_END, b"\xff" * 50, b""])[-1] is KEY_SPACE_END
    assert pickle.loads(pickle.dumps(KEY_SPACE_END)) is KEY_SPACE_END
    assert copy.deepcopy(KEY_SPACE_END) is KEY_SPACE_END
    assert repr(KEY_SPACE_END) == "KEY_SPACE_END"


# ---------------------------------------------------------------------------------------
# The provider's header (keys/provider.py)
# ---------------------------------------------------------------------------------------


def test_provider_key_layout_bytes() -> None:
    assert HEADER_BYTES == 6 and MAX_PARALLELISM == 32768
    assert provider_key(-1, b"k", 128) == b"\x00\x7f" + b"\xff\xff\xff\xff" + b"k"
    assert provider_key(300, b"", 128) == b"\x00\x2c" + b"\x00\x00\x01\x2c"
    assert provider_key(INT_MIN, b"xy") == b"\x00\x00" + b"\x80\x00\x00\x00" + b"xy"
    assert provider_key(-1, b"k") == b"\x7f\xff" + b"\xff\xff\xff\xff" + b"k"


def test_provider_key_round_trip_and_routing() -> None:
    for h in random_hashes(500):
        for max_p in (128, 32768):
            stored = provider_key(h, b"key\xff", max_p)
            kg, hash32, key = split_provider_key(stored)
            assert (kg, hash32, key) == (spark_key_group(h, max_p), h, b"key\xff")
            assert key_group_of(stored) == kg
            # the stored hash re-splits exactly for any partition count
            for n in (3, 4, 7):
                assert spark_partition_id(hash32, n) == h % n
    with pytest.raises(ValueError, match=str(2**31)):
        provider_key(2**31, b"", 128)


def test_route_hashes_agrees_with_the_scalar_codec_and_follows_index_entries() -> None:
    rows = [b"r%d" % i for i in range(200)]
    hashes = random_hashes(len(rows) - 11, seed=3)
    data = [provider_key(h, row) for h, row in zip(hashes, rows)]
    index = [S.index_key(ns, 60_000 * i, k) for i, (ns, k) in enumerate(zip([b"", b"ns", b"x" * 255] * 70, data))]
    others = [S.marker_key(b""), S.keyed_record_key(b"s"), S.SYSTEM_PREFIX]
    keys = data + index + others
    # an offset slice of a larger array, as Arrow batches after a filter can be
    array = pa.array([b"\x00" * 7] + keys + [b"\x00" * 7], pa.binary()).slice(1, len(keys))
    got, everywhere = route_hashes(array)
    expected = [split_provider_key(k)[1] for k in data]
    expected += [split_provider_key(S.data_key_of_index_key(k))[1] for k in index]
    assert got[:len(data) + len(index)].tolist() == expected
    assert everywhere.tolist() == [False] * (len(data) + len(index)) + [True] * len(others)
    for n in (1, 3, 7):
        assert [int(h) % n for h in got[:len(data)]] == [spark_partition_id(h, n) for h in hashes]
    assert [len(x) for x in route_hashes(pa.array([], pa.binary()))] == [0, 0]


@pytest.mark.parametrize("bad", [b"\x00\x01\x02", b"", S.index_key(b"", 0, b"\x00\x01")])
def test_route_hashes_rejects_keys_shorter_than_the_header(bad: bytes) -> None:
    good = provider_key(5, b"row")
    with pytest.raises(MalformedProviderKeyError) as err:
        route_hashes(pa.array([good, bad], pa.binary()))
    assert err.value.row == 1 and "not a spark-state provider store" in str(err.value)


# ---------------------------------------------------------------------------------------
# Keyed state entries (keys/keyed.py)
# ---------------------------------------------------------------------------------------


def test_keyed_entry_layout_and_round_trip() -> None:
    key = K.entry_key(258, b"ev", b"key", K.seq_suffix(7))
    assert key == b"\x01\x02" + b"\x02ev" + b"\x00\x00\x00\x03key" + struct.pack(">Q", 7)
    assert K.split_entry(key) == (258, b"ev", b"key", K.seq_suffix(7))
    assert K.key_group_of(key) == 258 and K.state_name_of(key) == b"ev"
    assert K.decode_seq(key, len(key) - K.SEQ_BYTES) == 7
    assert K.key_group_bytes(258) + K.name_part(b"ev") + K.key_part(b"key") == K.entry_key(258, b"ev", b"key")
    for bad in (-1, KEY_GROUP_LIMIT):
        with pytest.raises(ValueError, match="key group must be in"):
            K.key_group_bytes(bad)
    with pytest.raises(ValueError, match="255 bytes"):
        K.name_part(b"x" * 256)


def test_keyed_composites_are_unambiguous_and_list_elements_sort_in_order() -> None:
    assert K.entry_key(0, b"ab", b"c") != K.entry_key(0, b"a", b"bc")
    assert K.split_entry(K.entry_key(0, b"a", b"bc"))[1:3] == (b"a", b"bc")
    base = K.entry_key(9, b"l", b"k")
    elements = [base + K.seq_suffix(s) for s in (0, 1, 255, 256, 2**40)]
    assert sorted(elements) == elements and all(e > base for e in elements)


def test_keyed_key_group_range_holds_exactly_its_groups() -> None:
    keys = sorted(K.entry_key(kg, b"s", b"k") for kg in (0, 1, 41, 42, 43, 32766, 32767))
    start, end = K.key_group_range(41, 43)
    assert [K.key_group_of(k) for k in keys if start <= k < end] == [41, 42, 43]
    start, end = K.key_group_range(0, KEY_GROUP_LIMIT - 1)
    assert (start, end) == (b"\x00\x00", b"\x80\x00") and all(start <= k < end for k in keys)
    with pytest.raises(ValueError):
        K.key_group_range(0, KEY_GROUP_LIMIT)


# ---------------------------------------------------------------------------------------
# Timers (keys/timers.py)
# ---------------------------------------------------------------------------------------


def test_timer_key_layout_and_order() -> None:
    key = T.timer_key(300, T.PROCESSING_TIME, -5, b"\x01u")
    assert key == b"\x01\x2c" + b"\x02\xffT" + b"\x01" + struct.pack(">Q", 2**63 - 5) + b"\x01u"
    assert T.split_timer_key(key) == (300, T.PROCESSING_TIME, -5, b"\x01u")
    assert T.timestamp_and_key(key) == (-5, b"\x01u")
    assert K.split_entry(key)[:2] == (300, T.TIMER_STATE_NAME)  # a keyed entry of the reserved name
    times = [T.MIN_TIMESTAMP, -1, 0, 1, T.MAX_TIMESTAMP]
    keys = [T.timer_key(7, T.EVENT_TIME, t, b"k") for t in times]
    assert sorted(keys) == keys


def test_timer_domain_end_bounds_the_due_timers() -> None:
    times = (-3, 0, 10, T.MAX_TIMESTAMP)
    keys = sorted(T.timer_key(7, d, t, b"k") for d in (T.EVENT_TIME, T.PROCESSING_TIME) for t in times)
    start = T.domain_prefix(7, T.EVENT_TIME)
    for bound, want in ((0, [-3, 0]), (9, [-3, 0]), (T.MAX_TIMESTAMP, [-3, 0, 10, T.MAX_TIMESTAMP])):
        end = T.domain_end(7, T.EVENT_TIME, bound)
        assert [T.split_timer_key(k)[2] for k in keys if start <= k < end] == want


# ---------------------------------------------------------------------------------------
# Operator state (keys/operator.py)
# ---------------------------------------------------------------------------------------


def test_operator_state_keys() -> None:
    prefix = O.state_prefix(O.MODE_SPLIT, "s", O.KEYED_OPERATOR_PREFIX)
    assert prefix == b"\xfe\x01\x01s" and O.state_prefix(O.MODE_SPLIT, b"s", O.KEYED_OPERATOR_PREFIX) == prefix
    key = prefix + O.index_suffix(3)
    assert O.split_key(key, O.KEYED_OPERATOR_PREFIX) == (O.MODE_SPLIT, b"s", b"\x00\x00\x00\x03")
    start, end = O.modes_range(O.KEYED_OPERATOR_PREFIX)
    for mode in O.MODES:
        assert start <= O.state_prefix(mode, "x" * 255, O.KEYED_OPERATOR_PREFIX) + b"\xff" * 9 < end
    with pytest.raises(ValueError, match="longer than 255 bytes"):
        O.state_prefix(O.MODE_UNION, "x" * 256)
    assert set(O.MODE_KINDS) == set(O.MODES)


# ---------------------------------------------------------------------------------------
# The system keyspace (keys/system.py)
# ---------------------------------------------------------------------------------------


def test_system_keys_layouts_and_round_trips() -> None:
    assert S.index_key(b"ns", 5, b"dk") == b"\xff\x01\x02ns" + struct.pack(">Q", 5) + b"dk"
    assert S.decode_index_key(b"ns", S.index_key(b"ns", 5, b"dk")) == (5, b"dk")
    assert S.data_key_of_index_key(S.index_key(b"x" * 200, 2**64 - 1, b"\x00dk")) == b"\x00dk"
    assert S.marker_key(b"ns") == b"\xff\x02\x02ns"
    assert S.keyed_record_key(b"count") == b"\xff\x03\x05count"
    assert S.operator_record_key(b"s") == b"\xff\x04\x01s"
    assert S.name_of_record_key(S.keyed_record_key(b"count")) == b"count"
    assert S.name_of_named_key(S.index_key(b"ns", 1, b"k")) == b"ns"
    with pytest.raises(ValueError, match="TTL namespace has at most 255 bytes"):
        S.index_prefix(b"x" * 256)
    with pytest.raises(ValueError, match="state name has at most 255 bytes"):
        S.keyed_record_key(b"x" * 256)
    with pytest.raises(ValueError, match="not a schema record tag"):
        S.record_range(S.TTL_INDEX_TAG)


def test_system_tag_ranges_and_index_order() -> None:
    for tag in (S.TTL_INDEX_TAG, S.TTL_MARKER_TAG, S.KEYED_SCHEMA_TAG, S.OPERATOR_SCHEMA_TAG):
        start, end = S.tag_range(tag)
        key = S.named_key(tag, b"\xff" * 255) + b"\xff" * 20
        assert start <= key < end and S.is_system_key(key)
    buckets = [0, 1, 255, 256, 2**40]
    keys = [S.index_key(b"ns", b, b"\xff\xff") for b in buckets]
    assert sorted(keys) == keys
    start, end = S.index_range(b"ns", 256)
    assert [S.decode_index_key(b"ns", k)[0] for k in keys if start <= k < end] == [0, 1, 255]
    assert S.index_range(b"ns", 2**70)[1] == S.index_prefix(b"ns") + b"\xff" * 8


# ---------------------------------------------------------------------------------------
# The keyspace plan (keys/__init__.py)
# ---------------------------------------------------------------------------------------


def test_the_keyspace_plan_keeps_owners_apart() -> None:
    """Key-group keys (first byte 0x00..0x7F), operator state of keyed functions (0xFE) and the
    system keyspace (0xFF) never meet, whatever follows the first byte."""
    assert KEY_GROUP_KEYSPACE_END == b"\x80" and KEY_GROUP_LIMIT == 32768
    key_group_keys = [K.entry_key(kg, b"\xff" * 255, b"\xff" * 9, b"\xff" * 9) for kg in (0, 32767)]
    key_group_keys += [T.timer_key(32767, T.PROCESSING_TIME, T.MAX_TIMESTAMP, b"\xff" * 9)]
    key_group_keys += [provider_key(h, b"\xff" * 9) for h in (-1, INT_MIN, INT_MAX)]
    assert all(k < KEY_GROUP_KEYSPACE_END and not S.is_system_key(k) for k in key_group_keys)
    operator = [O.state_prefix(m, "\uffff" * 60, O.KEYED_OPERATOR_PREFIX) + b"\xff" * 9 for m in O.MODES]
    assert all(KEY_GROUP_KEYSPACE_END <= k < S.SYSTEM_PREFIX for k in operator)
    assert O.KEYED_OPERATOR_PREFIX < S.SYSTEM_PREFIX and not S.is_system_key(O.KEYED_OPERATOR_PREFIX)
    assert T.TIMER_STATE_NAME[:1] == S.SYSTEM_PREFIX  # not valid UTF-8: no user state name equals it
