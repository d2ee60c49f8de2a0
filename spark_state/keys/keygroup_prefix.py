"""The 2-byte key-group prefix every data key starts with, and key-group bounds of a key range.

Layout (big-endian, so bytewise order sorts by key group first)::

    offset 0  2 bytes  key group, unsigned 16-bit big-endian
    offset 2  n bytes  the rest of the key (its layout depends on the store: keyed state
                       :mod:`.keyed`, timers :mod:`.timers`, the provider :mod:`.provider`)

All keys of key group ``k`` sort before all keys of group ``k + 1``, so a key group is one
contiguous key range and a range of key groups is one scan (rescaling copies ranges, as
Flink's RocksDB backend does).

Two limits, on purpose different:

* the *format* holds key groups 0..65535 (:data:`MAX_ENCODABLE_KEY_GROUP`,
  :func:`encode_key_group`, :func:`key_group_bounds`, whose upper bound for group 65535 is
  :data:`KEY_SPACE_END`);
* stores that share one keyspace with operator state (first byte 0xFE) and the system
  keyspace (0xFF) only hold key groups below 32768 (Flink's largest max parallelism), so
  the first byte of a key-group key is 0x00..0x7F and every such key sorts below
  :data:`KEY_GROUP_KEYSPACE_END` (see the keyspace plan in :mod:`spark_state.keys`).
"""

from __future__ import annotations

import struct

from ..partitioning.keygroups import UPPER_BOUND_MAX_PARALLELISM, KeyGroupRange
from ..partitioning.murmur3 import is_int_in

__all__ = [
    "KEY_GROUP",
    "KEY_GROUP_PREFIX_BYTES",
    "MAX_ENCODABLE_KEY_GROUP",
    "KEY_GROUP_LIMIT",
    "KEY_GROUP_KEYSPACE_END",
    "KEY_SPACE_END",
    "encode_key_group",
    "prefix_key",
    "key_group_of",
    "strip_key_group",
    "key_group_bounds",
    "check_stored_key",
]

#: The prefix's struct: hot paths bind ``KEY_GROUP.pack`` / ``KEY_GROUP.unpack_from`` directly.
KEY_GROUP = struct.Struct(">H")
KEY_GROUP_PREFIX_BYTES = KEY_GROUP.size
MAX_ENCODABLE_KEY_GROUP = 0xFFFF
#: Key groups of stores with operator state or a system keyspace are below this (first byte <= 0x7F).
KEY_GROUP_LIMIT = UPPER_BOUND_MAX_PARALLELISM
#: Exclusive end of the keys that start with a key group below :data:`KEY_GROUP_LIMIT`.
KEY_GROUP_KEYSPACE_END = KEY_GROUP.pack(KEY_GROUP_LIMIT)[:1]


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
    if not is_int_in(kg, 0, MAX_ENCODABLE_KEY_GROUP):
        raise ValueError(
            f"key group {kg!r} cannot be encoded: must be an int in 0..{MAX_ENCODABLE_KEY_GROUP}"
        )
    return KEY_GROUP.pack(kg)


def prefix_key(kg: int, key: bytes) -> bytes:
    """Stored key ``[kg u16 BE][key bytes]``."""
    return encode_key_group(kg) + bytes(key)


def check_stored_key(stored_key: bytes, min_len: int, layout: str) -> None:
    """Raise ``ValueError`` if ``stored_key`` is shorter than the ``min_len``-byte ``layout`` prefix."""
    if len(stored_key) < min_len:
        raise ValueError(
            f"stored key {bytes(stored_key)!r} is {len(stored_key)} bytes, shorter than the "
            f"{min_len}-byte {layout} prefix"
        )


def key_group_of(stored_key: bytes) -> int:
    """Key group of a key-group-prefixed stored key: its first 2 bytes, unsigned big-endian."""
    check_stored_key(stored_key, KEY_GROUP_PREFIX_BYTES, "key-group")
    return KEY_GROUP.unpack_from(stored_key)[0]


def strip_key_group(stored_key: bytes) -> bytes:
    """The user key of a :func:`prefix_key` stored key: everything after the 2-byte prefix."""
    check_stored_key(stored_key, KEY_GROUP_PREFIX_BYTES, "key-group")
    return bytes(stored_key[KEY_GROUP_PREFIX_BYTES:])


def key_group_bounds(key_group_range: KeyGroupRange) -> tuple[bytes, bytes]:
    """Stored-key bounds ``(lower, upper)`` with ``lower <= k < upper`` iff ``key_group_of(k)`` is in range.

    ``lower = encode(start)`` and ``upper = encode(end + 1)``; for ``end == 65535`` there is
    no next prefix, so ``upper`` is :data:`KEY_SPACE_END`. The empty range gives
    ``(b"\\x00\\x00", b"\\x00\\x00")``, which contains nothing.
    """
    if key_group_range.is_empty:
        empty = encode_key_group(0)
        return empty, empty
    lower = encode_key_group(key_group_range.start)
    if key_group_range.end >= MAX_ENCODABLE_KEY_GROUP:
        encode_key_group(key_group_range.end)  # rejects end > 65535
        return lower, KEY_SPACE_END
    return lower, encode_key_group(key_group_range.end + 1)
