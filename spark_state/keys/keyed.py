"""Keys of keyed state entries: pure functions, no I/O.

Every entry of keyed state lives under a key of the form::

    offset 0        2 bytes  key group, uint16 BE (< 32768, :mod:`.keygroup_prefix`)
    offset 2        1 byte   len(state name) = n, uint8
    offset 3        n bytes  state name, UTF-8 (the *name part* is these 1 + n bytes)
    offset 3+n      4 bytes  len(key) = m, uint32 BE
    offset 7+n      m bytes  serialized key (:mod:`spark_state.process.keycodec` or the caller's)
    offset 7+n+m    ...      suffix

* the key group comes first, so a key group is one contiguous key range (rescaling copies
  ranges, as Flink's RocksDB backend does); key groups are below 32768, so the first byte
  is at most 0x7F and never collides with operator state (0xFE) or the system keyspace (0xFF);
* the lengths make the composite unambiguous (("ab", "c") never meets ("a", "bc"));
* the suffix depends on the state type: none for value, reducing and aggregating state;
  for list state, none for the list's sequence counter and ``[seq : uint64 BE]`` per
  element (elements sort in insertion order; the counter's *value* is the next seq, in the
  same 8-byte form); for map state, the serialized map key.

The *base key* of one (state, key) is everything before the suffix; the backend builds it
once per key as ``key group bytes + name part + key part`` (:data:`KEY_LENGTH` packs the
key part's length in that hot path).
"""

from __future__ import annotations

import struct

from .keygroup_prefix import KEY_GROUP, KEY_GROUP_LIMIT, key_group_of

__all__ = [
    "KEY_LENGTH",
    "SEQ",
    "SEQ_BYTES",
    "key_group_bytes",
    "name_part",
    "key_part",
    "entry_key",
    "seq_suffix",
    "decode_seq",
    "key_group_of",
    "state_name_of",
    "split_entry",
    "key_group_range",
]

#: uint32 BE length of the serialized key (the key part's head).
KEY_LENGTH = struct.Struct(">I")
#: uint64 BE list sequence number (element suffix and counter value).
SEQ = struct.Struct(">Q")
SEQ_BYTES = SEQ.size

_NAME_START = KEY_GROUP.size + 1  # key group, name length


def key_group_bytes(key_group: int) -> bytes:
    """The 2-byte prefix of ``key_group``, which must be below 32768."""
    if not 0 <= key_group < KEY_GROUP_LIMIT:
        raise ValueError(f"key group must be in [0, {KEY_GROUP_LIMIT}), got {key_group}")
    return KEY_GROUP.pack(key_group)


def name_part(name_bytes: bytes) -> bytes:
    """``[len u8][name]``: the state-name part of every key of one state."""
    if len(name_bytes) > 255:
        raise ValueError(f"a state name has at most 255 bytes, got {len(name_bytes)}")
    return bytes((len(name_bytes),)) + name_bytes


def key_part(key: bytes) -> bytes:
    """``[len u32 BE][key]``."""
    return KEY_LENGTH.pack(len(key)) + key


def entry_key(key_group: int, name_bytes: bytes, key: bytes, suffix: bytes = b"") -> bytes:
    """The full key of one entry (see the module docstring)."""
    return key_group_bytes(key_group) + name_part(name_bytes) + key_part(key) + suffix


def seq_suffix(seq: int) -> bytes:
    """The suffix of list element ``seq`` (also the stored form of the list's counter)."""
    return SEQ.pack(seq)


def decode_seq(data: bytes, offset: int = 0) -> int:
    """The sequence number at ``offset`` of ``data`` (an element key's suffix or a counter value)."""
    return SEQ.unpack_from(data, offset)[0]


def state_name_of(entry: bytes) -> bytes:
    """The state name (UTF-8 bytes) of a keyed-state entry key."""
    return entry[_NAME_START:_NAME_START + entry[KEY_GROUP.size]]


def split_entry(entry: bytes) -> tuple[int, bytes, bytes, bytes]:
    """``(key group, state name, key, suffix)`` of an entry key."""
    n = entry[KEY_GROUP.size]
    name = entry[_NAME_START:_NAME_START + n]
    (klen,) = KEY_LENGTH.unpack_from(entry, _NAME_START + n)
    start = _NAME_START + n + KEY_LENGTH.size
    return KEY_GROUP.unpack_from(entry)[0], name, entry[start:start + klen], entry[start + klen:]


def key_group_range(first: int, last: int) -> tuple[bytes, bytes]:
    """``[start, end)`` of the entries of key groups ``first..last`` (inclusive, both below 32768)."""
    key_group_bytes(last)  # rejects last >= 32768, so last + 1 still fits the prefix
    return key_group_bytes(first), KEY_GROUP.pack(last + 1)
