"""Spark's shuffle hash: ``Murmur3Hash`` (seed 42), partition ids and key groups of Spark-hashed keys.

Pure functions over ints and bytes (stdlib only, no I/O).

Spark sends a row to shuffle partition ``pmod(Murmur3Hash(keyColumns, seed=42), n)``
(``HashPartitioning.partitionIdExpression``). :func:`spark_hash` reproduces
``pyspark.sql.functions.hash(*cols)`` bit for bit, so Python code can tell which partition a
key is in. For the Spark path the key group is ``pmod(hash32, max_parallelism)``; see
:func:`spark_key_group` for why. The provider's stored keys keep this hash next to the key
group (:mod:`spark_state.keys.provider`).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import re
import struct
from typing import Any, Callable, Sequence

from ..errors import ConfigError
from .keygroups import check_max_parallelism
from .murmur3 import INT_MAX, INT_MIN, MASK32, check_int32, check_int64, fmix, is_int_in, mix_h1, mix_k1, to_int32

__all__ = [
    "SPARK_HASH_SEED",
    "spark_murmur3_int",
    "spark_murmur3_long",
    "spark_murmur3_bytes",
    "spark_hash",
    "spark_partition_id",
    "spark_key_group",
]

SPARK_HASH_SEED = 42  # seed of Spark's Murmur3Hash / F.hash / HashPartitioning

# --------------------------------------------------------------------------------------
# Spark: Murmur3_x86_32 and Murmur3Hash
# --------------------------------------------------------------------------------------


def spark_murmur3_int(value: int, seed: int) -> int:
    """Spark ``Murmur3_x86_32.hashInt(value, seed)``: ``fmix(mixH1(seed, mixK1(value)), 4)``.

    Both arguments and the result are signed 32-bit ints.
    """
    check_int32("value", value)
    check_int32("seed", seed)
    return to_int32(fmix(mix_h1(seed & MASK32, mix_k1(value & MASK32)), 4))


def spark_murmur3_long(value: int, seed: int) -> int:
    """Spark ``Murmur3_x86_32.hashLong(value, seed)``, a signed 32-bit int.

    ``low = (int) value; high = (int) (value >>> 32)``;
    ``h = mixH1(mixH1(seed, mixK1(low)), mixK1(high)); return fmix(h, 8)``.
    """
    check_int64("value", value)
    check_int32("seed", seed)
    bits = value & 0xFFFFFFFFFFFFFFFF
    h1 = mix_h1(seed & MASK32, mix_k1(bits & MASK32))
    h1 = mix_h1(h1, mix_k1(bits >> 32))
    return to_int32(fmix(h1, 8))


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
    check_int32("seed", seed)
    data = bytes(data)
    aligned = len(data) - len(data) % 4
    h1 = seed & MASK32
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = mix_h1(h1, mix_k1(word))
    for (signed_byte,) in struct.iter_unpack("b", data[aligned:]):
        h1 = mix_h1(h1, mix_k1(signed_byte & MASK32))
    return to_int32(fmix(h1, len(data)))


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
        if not is_int_in(value, low, high):
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


_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _hash_date(value: Any, seed: int) -> int:
    """``hashInt(days since 1970-01-01)``."""
    if isinstance(value, _dt.datetime) or not isinstance(value, _dt.date):
        raise ValueError(f"date value must be a datetime.date, got {value!r}")
    return spark_murmur3_int((value - _EPOCH_DATE).days, seed)


def _hash_timestamp(value: Any, seed: int) -> int:
    """``hashLong(microseconds since the epoch, UTC)``; a naive datetime is taken as UTC, as
    spark-state's key codec presents timestamp keys (:mod:`spark_state.process.keycodec`)."""
    if not isinstance(value, _dt.datetime):
        raise ValueError(f"timestamp value must be a datetime.datetime, got {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    delta = value - _EPOCH
    return spark_murmur3_long((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds, seed)


_DECIMAL_RE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_MAX_LONG_DIGITS = 18


def _decimal_hasher(precision: int, scale: int) -> Callable[[Any, int], int]:
    """Spark's ``Murmur3Hash`` of a ``decimal(p, s)``: ``hashLong(unscaled)`` when ``p <= 18``,
    else ``hashUnsafeBytes`` of the unscaled value's two's-complement big-endian bytes
    (``BigInteger.toByteArray``)."""
    def hash_decimal(value: Any, seed: int) -> int:
        if not isinstance(value, (decimal.Decimal, int)):
            raise ValueError(f"decimal value must be a decimal.Decimal, got {value!r}")
        with decimal.localcontext() as exact:  # the default context rounds to 28 digits
            exact.prec = 80
            unscaled = int(decimal.Decimal(value).scaleb(scale).to_integral_value(rounding=decimal.ROUND_HALF_UP))
        if precision <= _MAX_LONG_DIGITS:
            return spark_murmur3_long(unscaled, seed)
        length = unscaled.bit_length() // 8 + 1
        return spark_murmur3_bytes(unscaled.to_bytes(length, "big", signed=True), seed)

    return hash_decimal


_TYPE_HASHERS: dict[str, Callable[[Any, int], int]] = {
    "boolean": _hash_boolean,
    "byte": _checked_int(-(1 << 7), (1 << 7) - 1, "byte"),
    "short": _checked_int(-(1 << 15), (1 << 15) - 1, "short"),
    "int": _checked_int(INT_MIN, INT_MAX, "int"),
    "long": _hash_long,
    "float": _hash_float,
    "double": _hash_double,
    "string": _hash_string,
    "binary": _hash_binary,
    "date": _hash_date,
    "timestamp": _hash_timestamp,
    "timestamp_ntz": _hash_timestamp,
}

# Spark's DataType.simpleString / typeName spellings of the same types.
_TYPE_ALIASES = {"tinyint": "byte", "smallint": "short", "integer": "int", "bigint": "long"}


def _hasher_for(type_name: str) -> Callable[[Any, int], int]:
    canonical = type_name.strip().lower()
    canonical = _TYPE_ALIASES.get(canonical, canonical)
    decimal_type = _DECIMAL_RE.match(canonical)
    if decimal_type:
        return _decimal_hasher(int(decimal_type.group(1)), int(decimal_type.group(2)))
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
    * date: ``hashInt(days)``; timestamp, timestamp_ntz: ``hashLong(micros)`` (naive: UTC);
      decimal(p, s): ``hashLong(unscaled)`` for p <= 18, else the unscaled value's bytes.

    Type names are Spark's: boolean, byte/tinyint, short/smallint, int/integer, long/bigint,
    float, double, string, binary, date, timestamp, timestamp_ntz, decimal(p,s).

    :raises ValueError: mismatched lengths, an unknown type, or a value that is not of its type.
    """
    if len(values) != len(types):
        raise ValueError(f"spark_hash got {len(values)} values but {len(types)} types")
    if not values:
        raise ValueError("spark_hash needs at least one column (Spark's hash() does too)")
    check_int32("seed", seed)
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
    check_int32("hash32", hash32)
    if not is_int_in(num_partitions, 1, INT_MAX):
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
    (:mod:`spark_state.keys.provider`) also keeps the full 32-bit hash of every key: it lets state be
    re-split exactly for any ``n``.

    :raises ConfigError: if ``max_parallelism`` is not in 1..32768.
    """
    check_int32("hash32", hash32)
    check_max_parallelism(max_parallelism)
    return hash32 % max_parallelism
