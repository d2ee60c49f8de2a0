"""Flink's key-group math (copied from Flink's ``KeyGroupRangeAssignment`` / ``MathUtils``).

Pure functions over ints (stdlib only, no I/O).

A job has ``max_parallelism`` key groups, fixed for its whole life. A key with 32-bit hash
``h`` (Java ``hashCode()``) lives in key group::

    kg = murmurHash(h) % max_parallelism                     # murmurHash(h) >= 0

and operator ``i`` of ``p`` owns the contiguous, inclusive range::

    start = (i * max_parallelism + p - 1) // p               # = ceil(i * maxP / p)
    end   = ((i + 1) * max_parallelism - 1) // p
    owner(kg) = kg * p // max_parallelism

so rescaling moves whole key groups, never single keys. Spark's shuffle hash and the key
group of a Spark-hashed key are in :mod:`.spark_hash`; how a key group is written into a
stored key is in :mod:`spark_state.keys.keygroup_prefix`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Iterator

from ..errors import ConfigError
from .murmur3 import INT_MIN, MASK32, check_int32, fmix, is_int_in, mix_h1, mix_k1, to_int32

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "flink_murmur_hash",
    "java_string_hash_code",
    "assign_to_key_group",
    "compute_key_group_range_for_operator_index",
    "compute_operator_index_for_key_group",
    "compute_default_max_parallelism",
    "check_parallelism_preconditions",
    "check_max_parallelism",
]

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7  # 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15  # 32768, inclusive

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
    check_int32("code", code)
    r = to_int32(fmix(mix_h1(0, mix_k1(code & MASK32)), 4))
    if r >= 0:
        return r
    return -r if r != INT_MIN else 0


def java_string_hash_code(s: str) -> int:
    """Java ``String.hashCode()``: ``h = 31 * h + c`` over UTF-16 code units, signed 32-bit.

    Characters outside the BMP count as two code units (a surrogate pair), as in Java.
    """
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & MASK32
    return to_int32(h)


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


def _check_bounds(value: int, what: str) -> None:
    if not is_int_in(value, 1, UPPER_BOUND_MAX_PARALLELISM):
        raise ConfigError(f"{what} not within bounds: {value!r} (must be an int in 1..{UPPER_BOUND_MAX_PARALLELISM})")


def check_parallelism_preconditions(parallelism: int) -> None:
    """Flink's ``checkParallelismPreconditions``: require ``0 < parallelism <= 32768``.

    :raises ConfigError: naming the bad value.
    """
    _check_bounds(parallelism, "Operator parallelism")


def check_max_parallelism(max_parallelism: int) -> None:
    """Require ``1 <= max_parallelism <= 32768`` (the number of key groups).

    :raises ConfigError: naming the bad value.
    """
    _check_bounds(max_parallelism, "max_parallelism (number of key groups)")


def _check_parallelism_pair(max_parallelism: int, parallelism: int) -> None:
    check_parallelism_preconditions(parallelism)
    check_max_parallelism(max_parallelism)
    if max_parallelism < parallelism:
        raise ConfigError(
            f"max_parallelism {max_parallelism} must not be smaller than parallelism {parallelism}"
        )


def _check_key_group(key_group: int, max_parallelism: int) -> None:
    if not is_int_in(key_group, 0, max_parallelism - 1):
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
    if not is_int_in(operator_index, 0, parallelism - 1):
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
