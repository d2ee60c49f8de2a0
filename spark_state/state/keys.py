"""Key layout of keyed state: pure functions, no I/O.

Every entry of keyed state lives under a key of the form::

    [key group : uint16 BE][len(state name) : uint8][state name, UTF-8][len(key) : uint32 BE][key bytes][suffix]

* the key group comes first, so a key group is one contiguous key range (rescaling copies
  ranges, as Flink's RocksDB backend does); key groups are below 32768, so the first byte
  is at most 0x7F and never collides with the engine's 0xFF system keyspace;
* the lengths make the composite unambiguous (("ab", "c") never meets ("a", "bc"));
* the suffix depends on the state type: none for value, reducing and aggregating state;
  for list state, none for the list's sequence counter and ``[seq : uint64 BE]`` per
  element (elements sort in insertion order); for map state, the serialized map key.
"""

from __future__ import annotations

import struct
from typing import Optional

from ..keygroups import UPPER_BOUND_MAX_PARALLELISM

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

SEQ_BYTES = 8


def key_group_bytes(key_group: int) -> bytes:
    if not 0 <= key_group < UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"key group must be in [0, {UPPER_BOUND_MAX_PARALLELISM}), got {key_group}")
    return _U16.pack(key_group)


def name_part(name_bytes: bytes) -> bytes:
    return bytes((len(name_bytes),)) + name_bytes


def key_part(key: bytes) -> bytes:
    return _U32.pack(len(key)) + key


def entry_key(key_group: int, name_bytes: bytes, key: bytes, suffix: bytes = b"") -> bytes:
    """The full key of one entry (see the module docstring)."""
    return key_group_bytes(key_group) + name_part(name_bytes) + key_part(key) + suffix


def seq_suffix(seq: int) -> bytes:
    return _U64.pack(seq)


def decode_seq(data: bytes, offset: int = 0) -> int:
    return _U64.unpack_from(data, offset)[0]


def key_group_of(entry: bytes) -> int:
    """The key group of a keyed-state entry key."""
    return _U16.unpack_from(entry)[0]


def state_name_of(entry: bytes) -> bytes:
    """The state name (UTF-8 bytes) of a keyed-state entry key."""
    n = entry[2]
    return entry[3:3 + n]


def split_entry(entry: bytes) -> tuple[int, bytes, bytes, bytes]:
    """``(key group, state name, key, suffix)`` of an entry key."""
    n = entry[2]
    name = entry[3:3 + n]
    (klen,) = _U32.unpack_from(entry, 3 + n)
    start = 7 + n
    return _U16.unpack_from(entry)[0], name, entry[start:start + klen], entry[start + klen:]


def key_group_range(first: int, last: int) -> tuple[bytes, Optional[bytes]]:
    """``[start, end)`` of the entries of key groups ``first..last`` (inclusive)."""
    start = key_group_bytes(first)
    end = _U16.pack(last + 1) if last + 1 < (1 << 16) else None
    return start, end
