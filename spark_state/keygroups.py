"""Key groups: Flink's key-group math, Spark's shuffle hash, and the stored-key layouts.

Pure functions over ints and bytes (stdlib only, no I/O).

Flink key groups (copied from Flink's ``KeyGroupRangeAssignment`` / ``MathUtils``)
---------------------------------------------------------------------------------
A job has ``max_parallelism`` key groups, fixed for its whole life. A key with 32-bit hash
``h`` (Java ``hashCode()``) lives in key group::

    kg = murmurHash(h) % max_parallelism                     # murmurHash(h) >= 0

and operator ``i`` of ``p`` owns the contiguous, inclusive range::

    start = (i * max_parallelism + p - 1) // p               # = ceil(i * maxP / p)
    end   = ((i + 1) * max_parallelism - 1) // p
    owner(kg) = kg * p // max_parallelism

so rescaling moves whole key groups, never single keys.

Spark's shuffle hash
--------------------
Spark sends a row to shuffle partition ``pmod(Murmur3Hash(keyColumns, seed=42), n)``
(``HashPartitioning.partitionIdExpression``). :func:`spark_hash` reproduces
``pyspark.sql.functions.hash(*cols)`` bit for bit, so Python code can tell which partition a
key is in. For the Spark path the key group is ``pmod(hash32, max_parallelism)``; see
:func:`spark_key_group` for why.

Stored-key layouts (all integers big-endian, so bytewise order sorts by key group first)
--------------------------------------------------------------------------------------
Flink-style layout, :func:`prefix_key`::

    offset 0  2 bytes  key group, unsigned 16-bit big-endian (0..65535)
    offset 2  n bytes  serialized user key

Spark-provider layout, :func:`prefix_spark_key`::

    offset 0  2 bytes  key group = pmod(hash32, max_parallelism), unsigned 16-bit big-endian
    offset 2  4 bytes  hash32 = Spark Murmur3Hash of the key columns, signed 32-bit big-endian
                       (two's complement, so within a key group negative hashes sort after
                       positive ones; only grouping matters, not numeric order)
    offset 6  n bytes  serialized user key

Keeping the full hash lets state be re-split for any partition count or max parallelism
without deserializing keys. Both layouts start with the same 2-byte key-group prefix, so
:func:`key_group_of` and :func:`key_group_bounds` work on either.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Sequence

from spark_state.errors import ConfigError

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "SPARK_HASH_SEED",
    "KEY_GROUP_PREFIX_BYTES",
    "SPARK_KEY_PREFIX_BYTES",
    "MAX_ENCODABLE_KEY_GROUP",
    "KEY_SPACE_END",
    "KeyGroupRange",
    "flink_murmur_hash",
    "java_string_hash_code",
    "assign_to_key_group",
    "compute_key_group_range_for_operator_index",
    "compute_operator_index_for_key_group",
    "compute_default_max_parallelism",
    "check_parallelism_preconditions",
    "check_max_parallelism",
    "spark_murmur3_int",
    "spark_murmur3_long",
    "spark_murmur3_bytes",
    "spark_hash",
    "spark_partition_id",
    "spark_key_group",
    "encode_key_group",
    "prefix_key",
    "key_group_of",
    "strip_key_group",
    "key_group_bounds",
    "prefix_spark_key",
    "split_spark_key",
]

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7  # 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15  # 32768, inclusive
SPARK_HASH_SEED = 42  # seed of Spark's Murmur3Hash / F.hash / HashPartitioning

KEY_GROUP_PREFIX_BYTES = 2
SPARK_KEY_PREFIX_BYTES = KEY_GROUP_PREFIX_BYTES + 4
MAX_ENCODABLE_KEY_GROUP = 0xFFFF

_MASK32 = 0xFFFFFFFF
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_C1, _C2 = 0xCC9E2D51, 0x1B873593


# --------------------------------------------------------------------------------------
# 32-bit Java int helpers
# --------------------------------------------------------------------------------------


def _to_int32(x: int) -> int:
    """Wrap ``x`` to a signed 32-bit Java int (two's complement)."""
    x &= _MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def _rotl32(x: int, r: int) -> int:
    """``Integer.rotateLeft`` on the low 32 bits of ``x``; result unsigned."""
    x &= _MASK32
    return ((x << r) | (x >> (32 - r))) & _MASK32


def _is_int_in(value: object, low: int, high: int) -> bool:
    """True if ``value`` is an ``int`` (not a ``bool``) with ``low <= value <= high``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_int32(name: str, value: int) -> None:
    if not _is_int_in(value, _INT_MIN, _INT_MAX):
        raise ValueError(f"{name} must be a signed 32-bit int in [{_INT_MIN}, {_INT_MAX}], got {value!r}")


def _check_int64(name: str, value: int) -> None:
    if not _is_int_in(value, _LONG_MIN, _LONG_MAX):
        raise ValueError(f"{name} must be a signed 64-bit long in [{_LONG_MIN}, {_LONG_MAX}], got {value!r}")


def _mix_k1(k1: int) -> int:
    """Murmur3 ``mixK1``: ``k1 *= C1; k1 = rotl(k1, 15); k1 *= C2`` (unsigned 32-bit)."""
    k1 = (k1 * _C1) & _MASK32
    k1 = _rotl32(k1, 15)
    return (k1 * _C2) & _MASK32


def _mix_h1(h1: int, k1: int) -> int:
    """Murmur3 ``mixH1``: ``h1 ^= k1; h1 = rotl(h1, 13); h1 = h1 * 5 + 0xe6546b64``."""
    h1 = _rotl32((h1 ^ k1) & _MASK32, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK32


def _fmix(h1: int, length: int) -> int:
    """Murmur3 finaliser: ``h ^= length``, then the 0x85ebca6b / 0xc2b2ae35 avalanche."""
    h1 = (h1 ^ length) & _MASK32
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK32
    h1 ^= h1 >> 16
    return h1


# --------------------------------------------------------------------------------------
# Flink: hashes
# --------------------------------------------------------------------------------------


def flink_murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)``: a non-negative int in ``[0, 2**31 - 1]``.

    One Murmur3 round with seed 0 (``k = mixK1(code); h = mixH1(0, k)``), then
    ``fmix(h, 4)``, interpreted as a signed int ``r`` and returned as
    ``r if r >= 0 else (-r if r != Integer.MIN_VALUE else 0)``.

    :param code: a signed 32-bit int (typically a Java ``hashCode()``).
    """
    _check_int32("code", code)
    r = _to_int32(_fmix(_mix_h1(0, _mix_k1(code & _MASK32)), 4))
    if r >= 0:
        return r
    return -r if r != _INT_MIN else 0


def java_string_hash_code(s: str) -> int:
    """Java ``String.hashCode()``: ``h = 31 * h + c`` over UTF-16 code units, signed 32-bit.

    Characters outside the BMP count as two code units (a surrogate pair), as in Java.
    """
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & _MASK32
    return _to_int32(h)


# --------------------------------------------------------------------------------------
# Flink: key-group ranges
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyGroupRange:
    """Key groups ``start..end``, inclusive on both ends (Flink's ``KeyGroupRange``).

    ``KeyGroupRange.EMPTY`` is ``KeyGroupRange(0, -1)``, as in Flink; any other range
    needs ``0 <= start <= end``. ``len(r) == end - start + 1``.
    """

    start: int
    end: int

    EMPTY: ClassVar["KeyGroupRange"]

    def __post_init__(self) -> None:
        if (self.start, self.end) == (0, -1):
            return
        if self.start < 0 or self.start > self.end:
            raise ValueError(
                f"invalid key group range [{self.start}, {self.end}]: need 0 <= start <= end "
                "(use KeyGroupRange.EMPTY for the empty range)"
            )

    @classmethod
    def of(cls, start: int, end: int) -> "KeyGroupRange":
        """``KeyGroupRange(start, end)``, or :attr:`EMPTY` when ``start > end`` (Flink's ``of``)."""
        return cls(start, end) if start <= end else cls.EMPTY

    @property
    def is_empty(self) -> bool:
        """True for the empty range."""
        return self.end < self.start

    def __len__(self) -> int:
        return self.end - self.start + 1

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def intersection(self, other: "KeyGroupRange") -> "KeyGroupRange":
        """``[max(starts), min(ends)]``, or :attr:`EMPTY` if the ranges do not overlap."""
        return KeyGroupRange.of(max(self.start, other.start), min(self.end, other.end))


KeyGroupRange.EMPTY = KeyGroupRange(0, -1)


def check_parallelism_preconditions(parallelism: int) -> None:
    """Flink's ``checkParallelismPreconditions``: require ``0 < parallelism <= 32768``.

    :raises ConfigError: naming the bad value.
    """
    if not _is_int_in(parallelism, 1, UPPER_BOUND_MAX_PARALLELISM):
        raise ConfigError(
            f"Operator parallelism not within bounds: {parallelism!r} "
            f"(must be an int in 1..{UPPER_BOUND_MAX_PARALLELISM})"
        )


def check_max_parallelism(max_parallelism: int) -> None:
    """Require ``1 <= max_parallelism <= 32768`` (the number of key groups).

    :raises ConfigError: naming the bad value.
    """
    if not _is_int_in(max_parallelism, 1, UPPER_BOUND_MAX_PARALLELISM):
        raise ConfigError(
            f"max_parallelism (number of key groups) not within bounds: {max_parallelism!r} "
            f"(must be an int in 1..{UPPER_BOUND_MAX_PARALLELISM})"
        )


def _check_parallelism_pair(max_parallelism: int, parallelism: int) -> None:
    check_parallelism_preconditions(parallelism)
    check_max_parallelism(max_parallelism)
    if max_parallelism < parallelism:
        raise ConfigError(
            f"max_parallelism {max_parallelism} must not be smaller than parallelism {parallelism}"
        )


def _check_key_group(key_group: int, max_parallelism: int) -> None:
    if not _is_int_in(key_group, 0, max_parallelism - 1):
        raise ValueError(
            f"key group {key_group!r} out of range 0..{max_parallelism - 1} "
            f"for max_parallelism {max_parallelism}"
        )


def assign_to_key_group(key_hash: int, max_parallelism: int) -> int:
    """Flink's ``computeKeyGroupForKeyHash``: ``murmurHash(key_hash) % max_parallelism``.

    :param key_hash: the key's signed 32-bit Java ``hashCode()``.
    :raises ConfigError: if ``max_parallelism`` is not in 1..32768.
    """
    check_max_parallelism(max_parallelism)
    return flink_murmur_hash(key_hash) % max_parallelism


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """Key groups owned by operator ``i`` of ``p`` (Flink's ``computeKeyGroupRangeForOperatorIndex``).

    ``start = (i * maxP + p - 1) // p`` and ``end = ((i + 1) * maxP - 1) // p``, inclusive.

    :raises ConfigError: bad parallelism / max parallelism, or ``max_parallelism < parallelism``.
    :raises ValueError: ``operator_index`` not in ``0..parallelism - 1``.
    """
    _check_parallelism_pair(max_parallelism, parallelism)
    if not _is_int_in(operator_index, 0, parallelism - 1):
        raise ValueError(
            f"operator index {operator_index!r} out of range 0..{parallelism - 1} "
            f"for parallelism {parallelism}"
        )
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def compute_operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """Operator owning ``key_group``: ``key_group * parallelism // max_parallelism``.

    Inverse of :func:`compute_key_group_range_for_operator_index`.

    :raises ConfigError: bad parallelism / max parallelism, or ``max_parallelism < parallelism``.
    :raises ValueError: ``key_group`` not in ``0..max_parallelism - 1``.
    """
    _check_parallelism_pair(max_parallelism, parallelism)
    _check_key_group(key_group, max_parallelism)
    return key_group * parallelism // max_parallelism


def compute_default_max_parallelism(parallelism: int) -> int:
    """Flink's default: ``min(max(roundUpToPowerOfTwo(p + p // 2), 128), 32768)``.

    :raises ConfigError: if ``parallelism`` is not in 1..32768.
    """
    check_parallelism_preconditions(parallelism)
    x = parallelism + parallelism // 2
    power_of_two = 1 << (x - 1).bit_length()
    return min(max(power_of_two, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


# --------------------------------------------------------------------------------------
# Spark: Murmur3_x86_32 and Murmur3Hash
# --------------------------------------------------------------------------------------


def spark_murmur3_int(value: int, seed: int) -> int:
    """Spark ``Murmur3_x86_32.hashInt(value, seed)``: ``fmix(mixH1(seed, mixK1(value)), 4)``.

    Both arguments and the result are signed 32-bit ints.
    """
    _check_int32("value", value)
    _check_int32("seed", seed)
    return _to_int32(_fmix(_mix_h1(seed & _MASK32, _mix_k1(value & _MASK32)), 4))


def spark_murmur3_long(value: int, seed: int) -> int:
    """Spark ``Murmur3_x86_32.hashLong(value, seed)``, a signed 32-bit int.

    ``low = (int) value; high = (int) (value >>> 32)``;
    ``h = mixH1(mixH1(seed, mixK1(low)), mixK1(high)); return fmix(h, 8)``.
    """
    _check_int64("value", value)
    _check_int32("seed", seed)
    bits = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK32, _mix_k1(bits & _MASK32))
    h1 = _mix_h1(h1, _mix_k1(bits >> 32))
    return _to_int32(_fmix(h1, 8))


def spark_murmur3_bytes(data: bytes, seed: int) -> int:
    """Spark's legacy ``Murmur3_x86_32.hashUnsafeBytes(data, seed)``, a signed 32-bit int.

    This is what ``Murmur3Hash`` (``F.hash``, shuffle partitioning) uses for strings (their
    UTF-8 bytes) and binary, and it is *not* standard Murmur3 for the tail:

    * each aligned 4-byte word ``data[i:i+4]`` (``i < len - len % 4``) is read as a
      little-endian int (``Platform.getInt``, native order on every platform Spark runs on)
      and mixed: ``h = mixH1(h, mixK1(word))``;
    * each remaining byte is sign-extended to an int (Java ``byte``) and mixed *on its own*
      the same way: ``h = mixH1(h, mixK1((int) b))``;
    * the result is ``fmix(h, len(data))``.
    """
    _check_int32("seed", seed)
    data = bytes(data)
    aligned = len(data) - len(data) % 4
    h1 = seed & _MASK32
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for (signed_byte,) in struct.iter_unpack("b", data[aligned:]):
        h1 = _mix_h1(h1, _mix_k1(signed_byte & _MASK32))
    return _to_int32(_fmix(h1, len(data)))


def _to_float32(value: float) -> float:
    """Java's narrowing ``(float) value``: round to nearest float32, overflow to +-Infinity."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return value * float("inf")


def _float_to_int_bits(value: float) -> int:
    """Java ``Float.floatToIntBits`` of a float32 value: every NaN -> 0x7fc00000."""
    if value != value:
        return 0x7FC00000
    return struct.unpack("<i", struct.pack("<f", value))[0]


def _double_to_long_bits(value: float) -> int:
    """Java ``Double.doubleToLongBits`` (every NaN -> 0x7ff8000000000000)."""
    if value != value:
        return 0x7FF8000000000000
    return struct.unpack("<q", struct.pack("<d", value))[0]


def _checked_int(low: int, high: int, type_name: str) -> Callable[[Any, int], int]:
    def hash_int(value: Any, seed: int) -> int:
        if not _is_int_in(value, low, high):
            raise ValueError(f"{type_name} value must be an int in [{low}, {high}], got {value!r}")
        return spark_murmur3_int(value, seed)

    return hash_int


def _hash_boolean(value: Any, seed: int) -> int:
    """``hashInt(b ? 1 : 0, seed)``."""
    if not isinstance(value, bool):
        raise ValueError(f"boolean value must be a bool, got {value!r}")
    return spark_murmur3_int(1 if value else 0, seed)


def _hash_long(value: Any, seed: int) -> int:
    """``hashLong(value, seed)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"long value must be an int, got {value!r}")
    return spark_murmur3_long(value, seed)


def _as_float(value: Any, type_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{type_name} value must be a float, got {value!r}")
    return float(value)


def _hash_float(value: Any, seed: int) -> int:
    """``f == -0.0f ? hashInt(0) : hashInt(floatToIntBits(f))`` with ``f = (float) value``.

    The zero test comes after narrowing, so -1e-50 (which narrows to -0.0f) hashes as 0.0.
    """
    value = _to_float32(_as_float(value, "float"))
    return spark_murmur3_int(0 if value == 0.0 else _float_to_int_bits(value), seed)


def _hash_double(value: Any, seed: int) -> int:
    """``d == -0.0d ? hashLong(0L) : hashLong(doubleToLongBits(d))`` (so -0.0 hashes as 0.0)."""
    value = _as_float(value, "double")
    return spark_murmur3_long(0 if value == 0.0 else _double_to_long_bits(value), seed)


def _hash_string(value: Any, seed: int) -> int:
    """``hashUnsafeBytes`` over the UTF-8 bytes (binary-collation strings)."""
    if not isinstance(value, str):
        raise ValueError(f"string value must be a str, got {value!r}")
    return spark_murmur3_bytes(value.encode("utf-8"), seed)


def _hash_binary(value: Any, seed: int) -> int:
    """``hashUnsafeBytes`` over the raw bytes."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ValueError(f"binary value must be bytes-like, got {value!r}")
    return spark_murmur3_bytes(bytes(value), seed)


_TYPE_HASHERS: dict[str, Callable[[Any, int], int]] = {
    "boolean": _hash_boolean,
    "byte": _checked_int(-(1 << 7), (1 << 7) - 1, "byte"),
    "short": _checked_int(-(1 << 15), (1 << 15) - 1, "short"),
    "int": _checked_int(_INT_MIN, _INT_MAX, "int"),
    "long": _hash_long,
    "float": _hash_float,
    "double": _hash_double,
    "string": _hash_string,
    "binary": _hash_binary,
}

# Spark's DataType.simpleString / typeName spellings of the same types.
_TYPE_ALIASES = {"tinyint": "byte", "smallint": "short", "integer": "int", "bigint": "long"}


def _hasher_for(type_name: str) -> Callable[[Any, int], int]:
    canonical = type_name.strip().lower()
    canonical = _TYPE_ALIASES.get(canonical, canonical)
    try:
        return _TYPE_HASHERS[canonical]
    except KeyError:
        supported = ", ".join(sorted(_TYPE_HASHERS) + sorted(_TYPE_ALIASES))
        raise ValueError(
            f"unsupported column type {type_name!r} for spark_hash; supported: {supported}"
        ) from None


def spark_hash(values: Sequence[Any], types: Sequence[str], seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3Hash`` over one row's key columns = ``F.hash(*cols)``; signed 32-bit.

    ``h = seed; for (v, t) in columns: h = h if v is None else hash_t(v, h)``, with
    ``hash_t`` per Spark type ``t``:

    * boolean: ``hashInt(v ? 1 : 0, h)``; byte, short, int: ``hashInt(v, h)``; long: ``hashLong(v, h)``
    * float: ``hashInt(0, h)`` for +-0.0 else ``hashInt(floatToIntBits(v), h)`` (v rounded
      to float32; every NaN is 0x7fc00000)
    * double: ``hashLong(0, h)`` for +-0.0 else ``hashLong(doubleToLongBits(v), h)``
      (every NaN is 0x7ff8000000000000)
    * string: :func:`spark_murmur3_bytes` of the UTF-8 bytes; binary: of the bytes.

    Type names are Spark's: boolean, byte/tinyint, short/smallint, int/integer, long/bigint,
    float, double, string, binary.

    :raises ValueError: mismatched lengths, an unknown type, or a value that is not of its type.
    """
    if len(values) != len(types):
        raise ValueError(f"spark_hash got {len(values)} values but {len(types)} types")
    if not values:
        raise ValueError("spark_hash needs at least one column (Spark's hash() does too)")
    _check_int32("seed", seed)
    h = seed
    for value, type_name in zip(values, types):
        hasher = _hasher_for(type_name)
        if value is not None:
            h = hasher(value, h)
    return h


def spark_partition_id(hash32: int, num_partitions: int) -> int:
    """Shuffle partition of a row: ``pmod(hash32, num_partitions)`` (``HashPartitioning``).

    :raises ConfigError: if ``num_partitions < 1``.
    """
    _check_int32("hash32", hash32)
    if not _is_int_in(num_partitions, 1, _INT_MAX):
        raise ConfigError(f"num_partitions must be a positive int, got {num_partitions!r}")
    return hash32 % num_partitions  # Python's % with a positive divisor is pmod


def spark_key_group(hash32: int, max_parallelism: int) -> int:
    """Key group of a Spark-hashed key: ``pmod(hash32, max_parallelism)``.

    Why pmod of the *same* hash Spark shuffles by, and not Flink's murmur of it: when
    ``num_partitions`` divides ``max_parallelism``, ``hash32 == kg (mod max_parallelism)``
    implies ``hash32 == kg (mod num_partitions)``, so::

        spark_partition_id(hash32, n) == kg % n

    The key group alone decides the partition, and a key group never straddles two Spark
    partitions; state can be split or merged by whole key groups. When ``n`` does not divide
    ``max_parallelism`` that no longer holds, which is why the Spark layout
    (:func:`prefix_spark_key`) also keeps the full 32-bit hash of every key: it lets state be
    re-split exactly for any ``n``.

    :raises ConfigError: if ``max_parallelism`` is not in 1..32768.
    """
    _check_int32("hash32", hash32)
    check_max_parallelism(max_parallelism)
    return hash32 % max_parallelism


# --------------------------------------------------------------------------------------
# Stored-key codec
# --------------------------------------------------------------------------------------


class _KeySpaceEnd(bytes):
    """The singleton :data:`KEY_SPACE_END`: compares greater than every ``bytes`` value.

    No finite byte string sorts after every key that starts with ``b"\\xff\\xff"`` (append
    one more byte and the key is larger), so the exclusive upper bound of key group 65535
    cannot be a plain ``bytes``. This subclass overrides every comparison; because it
    subclasses ``bytes``, Python tries its reflected methods first, so ``key < KEY_SPACE_END``
    is True for every key, also inside ``sorted`` and ``bisect``. Its byte content
    (``b"\\xff\\xff"``) carries no meaning: a storage engine that compares raw bytes must
    treat ``upper is KEY_SPACE_END`` as "no upper bound".
    """

    def __new__(cls) -> "_KeySpaceEnd":
        return super().__new__(cls, b"\xff\xff")

    def __eq__(self, other: object) -> bool:
        return other is self

    def __ne__(self, other: object) -> bool:
        return other is not self

    def __hash__(self) -> int:
        return object.__hash__(self)

    def __lt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return other is self

    def __gt__(self, other: object) -> bool:
        return other is not self

    def __ge__(self, other: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "KEY_SPACE_END"

    __str__ = __repr__

    def __reduce__(self) -> str:
        return "KEY_SPACE_END"


KEY_SPACE_END: bytes = _KeySpaceEnd()
"""Exclusive upper bound past every stored key; see :class:`_KeySpaceEnd`."""


def encode_key_group(kg: int) -> bytes:
    """The 2-byte key-group prefix: ``kg`` as unsigned 16-bit big-endian (0..65535).

    Big-endian makes bytewise order equal numeric order, so all keys of group ``k`` sort
    before all keys of group ``k + 1``.
    """
    if not _is_int_in(kg, 0, MAX_ENCODABLE_KEY_GROUP):
        raise ValueError(
            f"key group {kg!r} cannot be encoded: must be an int in 0..{MAX_ENCODABLE_KEY_GROUP}"
        )
    return struct.pack(">H", kg)


def prefix_key(kg: int, key: bytes) -> bytes:
    """Stored key ``[kg u16 BE][key bytes]``."""
    return encode_key_group(kg) + bytes(key)


def _check_stored_key(stored_key: bytes, min_len: int, layout: str) -> None:
    if len(stored_key) < min_len:
        raise ValueError(
            f"stored key {bytes(stored_key)!r} is {len(stored_key)} bytes, shorter than the "
            f"{min_len}-byte {layout} prefix"
        )


def key_group_of(stored_key: bytes) -> int:
    """Key group of a stored key (either layout): its first 2 bytes, unsigned big-endian."""
    _check_stored_key(stored_key, KEY_GROUP_PREFIX_BYTES, "key-group")
    return struct.unpack_from(">H", stored_key)[0]


def strip_key_group(stored_key: bytes) -> bytes:
    """The user key of a :func:`prefix_key` stored key: everything after the 2-byte prefix."""
    _check_stored_key(stored_key, KEY_GROUP_PREFIX_BYTES, "key-group")
    return bytes(stored_key[KEY_GROUP_PREFIX_BYTES:])


def key_group_bounds(key_group_range: KeyGroupRange) -> tuple[bytes, bytes]:
    """Stored-key bounds ``(lower, upper)`` with ``lower <= k < upper`` iff ``key_group_of(k)`` is in range.

    ``lower = encode(start)`` and ``upper = encode(end + 1)``; for ``end == 65535`` there is
    no next prefix, so ``upper`` is :data:`KEY_SPACE_END`. The empty range gives
    ``(b"\\x00\\x00", b"\\x00\\x00")``, which contains nothing. Works for both layouts.
    """
    if key_group_range.is_empty:
        empty = encode_key_group(0)
        return empty, empty
    lower = encode_key_group(key_group_range.start)
    if key_group_range.end >= MAX_ENCODABLE_KEY_GROUP:
        encode_key_group(key_group_range.end)  # rejects end > 65535
        return lower, KEY_SPACE_END
    return lower, encode_key_group(key_group_range.end + 1)


def prefix_spark_key(hash32: int, max_parallelism: int, key: bytes) -> bytes:
    """Spark-provider stored key ``[kg u16 BE][hash32 i32 BE][key bytes]``.

    ``kg = spark_key_group(hash32, max_parallelism)``.
    """
    kg = spark_key_group(hash32, max_parallelism)
    return struct.pack(">Hi", kg, hash32) + bytes(key)


def split_spark_key(stored: bytes) -> tuple[int, int, bytes]:
    """Inverse of :func:`prefix_spark_key`: ``(key_group, hash32, key)``; hash32 is signed."""
    _check_stored_key(stored, SPARK_KEY_PREFIX_BYTES, "Spark key")
    kg, hash32 = struct.unpack_from(">Hi", stored)
    return kg, hash32, bytes(stored[SPARK_KEY_PREFIX_BYTES:])
