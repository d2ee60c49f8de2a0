"""Murmur3 (x86, 32-bit) building blocks and Java-int helpers shared by Flink's and Spark's hashes.

Pure functions over Python ints (stdlib only). Both :mod:`.keygroups` (Flink's
``MathUtils.murmurHash``) and :mod:`.spark_hash` (Spark's ``Murmur3_x86_32``) are built from
the same three steps, so they live here once:

* ``mix_k1(k)``: ``k *= C1; k = rotl(k, 15); k *= C2``;
* ``mix_h1(h, k)``: ``h ^= k; h = rotl(h, 13); h = h * 5 + 0xe6546b64``;
* ``fmix(h, length)``: ``h ^= length`` then the 0x85ebca6b / 0xc2b2ae35 avalanche.

All arithmetic is on the low 32 bits, unsigned; :func:`to_int32` turns a result into a
signed Java ``int``.
"""

from __future__ import annotations

MASK32 = 0xFFFFFFFF
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
_C1, _C2 = 0xCC9E2D51, 0x1B873593


def to_int32(x: int) -> int:
    """Wrap ``x`` to a signed 32-bit Java int (two's complement)."""
    x &= MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def rotl32(x: int, r: int) -> int:
    """``Integer.rotateLeft`` on the low 32 bits of ``x``; result unsigned."""
    x &= MASK32
    return ((x << r) | (x >> (32 - r))) & MASK32


def is_int_in(value: object, low: int, high: int) -> bool:
    """True if ``value`` is an ``int`` (not a ``bool``) with ``low <= value <= high``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_int32(name: str, value: int) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a signed 32-bit int."""
    if not is_int_in(value, INT_MIN, INT_MAX):
        raise ValueError(f"{name} must be a signed 32-bit int in [{INT_MIN}, {INT_MAX}], got {value!r}")


def check_int64(name: str, value: int) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a signed 64-bit long."""
    if not is_int_in(value, LONG_MIN, LONG_MAX):
        raise ValueError(f"{name} must be a signed 64-bit long in [{LONG_MIN}, {LONG_MAX}], got {value!r}")


def mix_k1(k1: int) -> int:
    """Murmur3 ``mixK1``: ``k1 *= C1; k1 = rotl(k1, 15); k1 *= C2`` (unsigned 32-bit)."""
    k1 = (k1 * _C1) & MASK32
    k1 = rotl32(k1, 15)
    return (k1 * _C2) & MASK32


def mix_h1(h1: int, k1: int) -> int:
    """Murmur3 ``mixH1``: ``h1 ^= k1; h1 = rotl(h1, 13); h1 = h1 * 5 + 0xe6546b64``."""
    h1 = rotl32((h1 ^ k1) & MASK32, 13)
    return (h1 * 5 + 0xE6546B64) & MASK32


def fmix(h1: int, length: int) -> int:
    """Murmur3 finaliser: ``h ^= length``, then the 0x85ebca6b / 0xc2b2ae35 avalanche."""
    h1 = (h1 ^ length) & MASK32
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & MASK32
    h1 ^= h1 >> 16
    return h1
