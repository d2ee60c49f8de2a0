"""Unit tests for spark_state.partitioning: Flink's key-group math and Spark's hash (pure Python, no Spark)."""

from __future__ import annotations

import struct

import pytest

from hash_samples import INT_MAX, INT_MIN, random_hashes
from spark_state.errors import ConfigError
from spark_state.partitioning.keygroups import (
    DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    assign_to_key_group,
    check_max_parallelism,
    check_parallelism_preconditions,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    flink_murmur_hash,
    java_string_hash_code,
)
from spark_state.partitioning.spark_hash import (
    spark_hash,
    spark_key_group,
    spark_murmur3_bytes,
    spark_murmur3_int,
    spark_murmur3_long,
    spark_partition_id,
)

# ---------------------------------------------------------------------------------------
# Flink test vectors (reference doc section 1.1)
# ---------------------------------------------------------------------------------------

INTEGER_VECTORS = [  # (Integer key = its hashCode, murmurHash, kg @ 128)
    (0, 593689054, 94),
    (1, 68075478, 86),
    (2, 1085422463, 127),
    (42, 1134849565, 29),
    (-1, 1982413648, 80),
]

STRING_VECTORS = [  # (String key, hashCode, murmurHash, kg @ 128, kg @ 32768)
    ("a", 97, 1455541201, 81, 19409),
    ("hello", 99162322, 1715862179, 35, 31395),
    ("user-1", -836031825, 1662039673, 121, 13945),
]


@pytest.mark.parametrize("key, murmur, kg128", INTEGER_VECTORS)
def test_flink_integer_key_vectors(key: int, murmur: int, kg128: int) -> None:
    assert flink_murmur_hash(key) == murmur
    assert assign_to_key_group(key, 128) == kg128


@pytest.mark.parametrize("key, hash_code, murmur, kg128, kg32768", STRING_VECTORS)
def test_flink_string_key_vectors(key: str, hash_code: int, murmur: int, kg128: int, kg32768: int) -> None:
    assert java_string_hash_code(key) == hash_code
    assert flink_murmur_hash(hash_code) == murmur
    assert assign_to_key_group(hash_code, 128) == kg128
    assert assign_to_key_group(hash_code, 32768) == kg32768


def test_java_string_hash_code_known_values() -> None:
    assert java_string_hash_code("") == 0
    assert java_string_hash_code("hello world") == 1794106052
    # the famous string whose hashCode is Integer.MIN_VALUE (overflow wraps like Java)
    assert java_string_hash_code("polygenelubricants") == INT_MIN
    # non-BMP characters count as a UTF-16 surrogate pair: 0xD83D * 31 + 0xDE00
    assert java_string_hash_code("\U0001F600") == 0xD83D * 31 + 0xDE00
    assert java_string_hash_code("é") == 0xE9


def test_flink_murmur_hash_is_non_negative_and_checks_range() -> None:
    for h in random_hashes(2000):
        assert 0 <= flink_murmur_hash(h) <= INT_MAX
    assert flink_murmur_hash(java_string_hash_code("polygenelubricants")) >= 0
    for bad in (INT_MAX + 1, INT_MIN - 1):
        with pytest.raises(ValueError, match=str(bad)):
            flink_murmur_hash(bad)


# ---------------------------------------------------------------------------------------
# Flink ranges and parallelism
# ---------------------------------------------------------------------------------------


def test_default_max_parallelism_worked_values() -> None:
    for p in range(1, 86):
        assert compute_default_max_parallelism(p) == 128
    assert compute_default_max_parallelism(86) == 256
    assert compute_default_max_parallelism(100) == 256
    assert compute_default_max_parallelism(1000) == 2048
    assert compute_default_max_parallelism(30000) == 32768
    assert compute_default_max_parallelism(UPPER_BOUND_MAX_PARALLELISM) == UPPER_BOUND_MAX_PARALLELISM
    assert DEFAULT_LOWER_BOUND_MAX_PARALLELISM == 128 and UPPER_BOUND_MAX_PARALLELISM == 32768


def test_ranges_for_max_parallelism_128_and_parallelism_3() -> None:
    ranges = [compute_key_group_range_for_operator_index(128, 3, i) for i in range(3)]
    assert ranges == [KeyGroupRange(0, 42), KeyGroupRange(43, 85), KeyGroupRange(86, 127)]


def test_operator_index_for_key_group_worked_values() -> None:
    assert compute_operator_index_for_key_group(128, 3, 0) == 0
    assert compute_operator_index_for_key_group(128, 3, 42) == 0
    assert compute_operator_index_for_key_group(128, 3, 43) == 1
    assert compute_operator_index_for_key_group(128, 3, 85) == 1
    assert compute_operator_index_for_key_group(128, 3, 86) == 2
    assert compute_operator_index_for_key_group(128, 3, 127) == 2


PARALLELISM_CASES = [
    (max_p, p)
    for max_p in (1, 2, 3, 7, 10, 128, 129, 1000, 4096, 32768)
    for p in (1, 2, 3, 5, 7, 16, 100, 127, 128, 1000, 32768)
    if p <= max_p
]


@pytest.mark.parametrize("max_p, p", PARALLELISM_CASES)
def test_every_key_group_maps_back_to_the_operator_whose_range_contains_it(max_p: int, p: int) -> None:
    ranges = [compute_key_group_range_for_operator_index(max_p, p, i) for i in range(p)]
    # contiguous, non-empty ranges that tile 0..max_p-1 in operator order
    assert ranges[0].start == 0 and ranges[-1].end == max_p - 1
    for previous, current in zip(ranges, ranges[1:]):
        assert current.start == previous.end + 1
    assert sum(len(r) for r in ranges) == max_p
    assert all(len(r) in (max_p // p, -(-max_p // p)) for r in ranges)  # sizes differ by <= 1
    for i, r in enumerate(ranges):
        for kg in r:
            assert compute_operator_index_for_key_group(max_p, p, kg) == i


@pytest.mark.parametrize("bad", [0, -1, 32769, 10**9, True, 2.0, "4"])
def test_parallelism_preconditions_reject_bad_values(bad: object) -> None:
    with pytest.raises(ConfigError, match="parallelism not within bounds: " + repr(bad).replace("(", r"\(")):
        check_parallelism_preconditions(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        compute_default_max_parallelism(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        compute_key_group_range_for_operator_index(128, bad, 0)  # type: ignore[arg-type]


def test_parallelism_preconditions_accept_bounds() -> None:
    check_parallelism_preconditions(1)
    check_parallelism_preconditions(32768)
    check_max_parallelism(1)
    check_max_parallelism(32768)


@pytest.mark.parametrize("bad", [0, -5, 32769])
def test_max_parallelism_is_validated(bad: int) -> None:
    with pytest.raises(ConfigError, match=f"max_parallelism .*{bad}"):
        check_max_parallelism(bad)
    with pytest.raises(ConfigError, match=str(bad)):
        assign_to_key_group(1, bad)
    with pytest.raises(ConfigError, match=str(bad)):
        compute_key_group_range_for_operator_index(bad, 1, 0)
    with pytest.raises(ConfigError, match=str(bad)):
        compute_operator_index_for_key_group(bad, 1, 0)
    with pytest.raises(ConfigError, match=str(bad)):
        spark_key_group(1, bad)


def test_max_parallelism_smaller_than_parallelism_is_rejected() -> None:
    with pytest.raises(ConfigError, match="max_parallelism 4 must not be smaller than parallelism 5"):
        compute_key_group_range_for_operator_index(4, 5, 0)
    with pytest.raises(ConfigError, match="max_parallelism 4"):
        compute_operator_index_for_key_group(4, 5, 0)


@pytest.mark.parametrize("bad", [-1, 3, 100])
def test_operator_index_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match=f"operator index {bad} out of range 0..2"):
        compute_key_group_range_for_operator_index(128, 3, bad)


@pytest.mark.parametrize("bad", [-1, 128, 1000])
def test_key_group_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match=f"key group {bad} out of range 0..127"):
        compute_operator_index_for_key_group(128, 3, bad)


# ---------------------------------------------------------------------------------------
# KeyGroupRange
# ---------------------------------------------------------------------------------------


def test_key_group_range_is_inclusive() -> None:
    r = KeyGroupRange(3, 7)
    assert len(r) == 5
    assert list(r) == [3, 4, 5, 6, 7]
    assert 3 in r and 7 in r
    assert 2 not in r and 8 not in r and "4" not in r
    assert not r.is_empty
    assert len(KeyGroupRange(5, 5)) == 1 and list(KeyGroupRange(5, 5)) == [5]


def test_key_group_range_empty_form() -> None:
    empty = KeyGroupRange.EMPTY
    assert (empty.start, empty.end) == (0, -1)
    assert empty == KeyGroupRange(0, -1)
    assert len(empty) == 0 and list(empty) == [] and 0 not in empty
    assert empty.is_empty
    assert KeyGroupRange.of(5, 4) is KeyGroupRange.EMPTY
    assert KeyGroupRange.of(4, 5) == KeyGroupRange(4, 5)


@pytest.mark.parametrize("start, end", [(-1, 3), (5, 4), (1, 0), (0, -2)])
def test_key_group_range_rejects_invalid_bounds(start: int, end: int) -> None:
    with pytest.raises(ValueError, match=rf"\[{start}, {end}\]"):
        KeyGroupRange(start, end)


def test_key_group_range_is_frozen_and_hashable() -> None:
    r = KeyGroupRange(1, 2)
    with pytest.raises(AttributeError):
        r.start = 0  # type: ignore[misc]
    assert {r: "x"}[KeyGroupRange(1, 2)] == "x"


def test_key_group_range_intersection() -> None:
    a = KeyGroupRange(0, 42)
    assert a.intersection(KeyGroupRange(40, 60)) == KeyGroupRange(40, 42)
    assert a.intersection(KeyGroupRange(10, 20)) == KeyGroupRange(10, 20)
    assert a.intersection(KeyGroupRange(42, 42)) == KeyGroupRange(42, 42)
    assert a.intersection(KeyGroupRange(43, 85)) is KeyGroupRange.EMPTY
    assert a.intersection(KeyGroupRange.EMPTY) is KeyGroupRange.EMPTY
    assert KeyGroupRange.EMPTY.intersection(a) is KeyGroupRange.EMPTY


def test_rescale_intersections_cover_each_new_range_exactly() -> None:
    """Old ranges (p=3) intersected with a new range (p=5) tile it, as Flink's restore relies on."""
    old = [compute_key_group_range_for_operator_index(128, 3, i) for i in range(3)]
    for j in range(5):
        new = compute_key_group_range_for_operator_index(128, 5, j)
        pieces = [o.intersection(new) for o in old]
        assert sorted(kg for piece in pieces for kg in piece) == list(new)


# ---------------------------------------------------------------------------------------
# Spark Murmur3 (expected values computed by Spark 4 with SELECT hash(...))
# ---------------------------------------------------------------------------------------

SPARK_VECTORS = [  # (values, types, F.hash result from Spark)
    ([1], ["int"], -559580957),
    ([-1], ["int"], -1604776387),
    ([0], ["int"], 933211791),
    ([INT_MAX], ["int"], 133916647),
    ([INT_MIN], ["int"], 723455942),
    ([1], ["long"], -1712319331),
    ([-(2**63)], ["long"], -853646085),
    ([""], ["string"], 142593372),
    (["a"], ["string"], 1485273170),
    (["abc"], ["string"], 1322437556),
    (["abcd"], ["string"], -396302900),
    (["abcde"], ["string"], 814637928),
    (["Spark"], ["string"], 228093765),
    (["héllo"], ["string"], 1212979866),
    ([b"\xff"], ["binary"], 1398487324),
    ([bytes([1, 2, 3, 0x80, 0x81])], ["binary"], 255108458),
    ([True], ["boolean"], -559580957),
    ([False], ["boolean"], 933211791),
    ([1.5], ["float"], -221251528),
    ([-0.0], ["float"], 933211791),
    ([float("nan")], ["double"], -1281358385),
    ([1.5], ["double"], 1290763749),
    ([-0.0], ["double"], -1670924195),
    ([1, "a"], ["int", "string"], -936062819),
    ([None], ["int"], 42),
    ([None, "a"], ["int", "string"], 1485273170),
    ([1], ["byte"], -559580957),
    ([-1], ["short"], -1604776387),
]


@pytest.mark.parametrize("values, types, expected", SPARK_VECTORS)
def test_spark_hash_matches_values_computed_by_spark(values: list, types: list, expected: int) -> None:
    assert spark_hash(values, types) == expected


def test_spark_murmur3_primitives_agree_with_spark_hash() -> None:
    assert spark_murmur3_int(1, 42) == -559580957
    assert spark_murmur3_long(1, 42) == -1712319331
    assert spark_murmur3_bytes(b"Spark", 42) == 228093765
    assert spark_murmur3_bytes(bytearray(b"abcd"), 42) == -396302900


def test_spark_tail_bytes_are_mixed_one_by_one_as_signed_ints() -> None:
    # 5 bytes = one aligned word + one tail byte 0x81, mixed as the signed int -127
    data = bytes([1, 2, 3, 0x80, 0x81])
    assert spark_murmur3_bytes(data, 42) == 255108458
    # The tail byte 0xff is hashed as -1, not 255: it differs from a hash of [0xff, 0, 0, 0]
    assert spark_murmur3_bytes(b"\xff", 42) != spark_murmur3_bytes(b"\xff\x00\x00\x00", 42)


def test_spark_hash_float_and_double_canonicalisation() -> None:
    assert spark_hash([-0.0], ["float"]) == spark_hash([0.0], ["float"]) == spark_murmur3_int(0, 42)
    assert spark_hash([-0.0], ["double"]) == spark_hash([0.0], ["double"]) == spark_murmur3_long(0, 42)
    odd_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0]
    assert spark_hash([odd_nan], ["double"]) == spark_murmur3_long(0x7FF8000000000000, 42)
    assert spark_hash([odd_nan], ["float"]) == spark_murmur3_int(0x7FC00000, 42)
    # doubleToLongBits of 1.5 is 0x3FF8000000000000; floatToIntBits of 1.5f is 0x3FC00000
    assert spark_hash([1.5], ["double"]) == spark_murmur3_long(0x3FF8000000000000, 42)
    assert spark_hash([1.5], ["float"]) == spark_murmur3_int(0x3FC00000, 42)
    # float values round to float32 first; beyond float32 range they become Infinity like Java
    assert spark_hash([0.1], ["float"]) == spark_murmur3_int(0x3DCCCCCD, 42)
    assert spark_hash([1e300], ["float"]) == spark_hash([float("inf")], ["float"])
    assert spark_hash([-1e300], ["float"]) == spark_murmur3_int(-0x800000, 42)  # 0xff800000
    # values that narrow to -0.0f hash like 0.0 (Java tests f == -0.0f after the cast)
    assert spark_hash([-1e-50], ["float"]) == spark_hash([0.0], ["float"])
    assert spark_hash([1e-50], ["float"]) == spark_hash([0.0], ["float"])
    assert spark_hash([-1e-50], ["double"]) != spark_hash([0.0], ["double"])


def test_spark_hash_chains_columns_and_skips_nulls() -> None:
    first = spark_hash([7], ["long"])
    assert spark_hash([7, "x"], ["long", "string"]) == spark_hash(["x"], ["string"], seed=first)
    assert spark_hash([7, None], ["long", "string"]) == first
    assert spark_hash([None, None], ["int", "binary"]) == 42
    assert spark_hash([None], ["int"], seed=-5) == -5


def test_spark_hash_accepts_spark_type_spellings() -> None:
    assert spark_hash([5], ["integer"]) == spark_hash([5], ["int"]) == spark_hash([5], ["INT"])
    assert spark_hash([5], ["bigint"]) == spark_hash([5], ["long"])
    assert spark_hash([5], ["tinyint"]) == spark_hash([5], ["byte"])
    assert spark_hash([5], ["smallint"]) == spark_hash([5], ["short"])


@pytest.mark.parametrize(
    "values, types, message",
    [
        ([1], [], "1 values but 0 types"),
        ([], [], "at least one column"),
        ([1], ["decimal"], "unsupported column type 'decimal'"),
        ([128], ["byte"], "128"),
        ([-32769], ["short"], "-32769"),
        ([2**31], ["int"], str(2**31)),
        ([2**63], ["long"], str(2**63)),
        (["1"], ["int"], "'1'"),
        ([1], ["boolean"], "bool"),
        ([True], ["int"], "True"),
        ([b"x"], ["string"], "str"),
        (["x"], ["binary"], "bytes-like"),
        (["1.0"], ["double"], "'1.0'"),
    ],
)
def test_spark_hash_rejects_bad_input(values: list, types: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spark_hash(values, types)


def test_spark_partition_id_is_pmod() -> None:
    assert spark_partition_id(-1, 4) == 3
    assert spark_partition_id(INT_MIN, 7) == 5  # Java: ((-2^31 % 7) + 7) % 7 = (-2 + 7) % 7
    assert spark_partition_id(10, 4) == 2
    assert spark_partition_id(spark_hash([1], ["int"]), 200) == 43  # -559580957 pmod 200
    with pytest.raises(ConfigError, match="num_partitions must be a positive int, got 0"):
        spark_partition_id(1, 0)


def test_spark_key_group_is_pmod_of_the_hash() -> None:
    assert spark_key_group(-1, 128) == 127
    assert spark_key_group(INT_MIN, 128) == 0
    assert spark_key_group(INT_MAX, 32768) == 32767
    with pytest.raises(ValueError, match=str(2**31)):
        spark_key_group(2**31, 128)


@pytest.mark.parametrize("max_p", [1, 12, 120, 128, 1000, 32768])
def test_key_groups_never_straddle_partitions_when_n_divides_max_parallelism(max_p: int) -> None:
    divisors = [n for n in range(1, max_p + 1) if max_p % n == 0]
    for h in random_hashes(1500, seed=max_p):
        kg = spark_key_group(h, max_p)
        for n in divisors:
            assert spark_partition_id(h, n) == kg % n


def test_key_groups_do_straddle_partitions_when_n_does_not_divide_max_parallelism() -> None:
    """Why the Spark layout keeps the full hash: with maxP=128, n=3 the key group is not enough."""
    partitions_per_kg: dict[int, set[int]] = {}
    for h in random_hashes(3000):
        partitions_per_kg.setdefault(spark_key_group(h, 128), set()).add(spark_partition_id(h, 3))
    assert any(len(parts) > 1 for parts in partitions_per_kg.values())
