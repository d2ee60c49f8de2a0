"""Keys of timers of keyed functions: pure functions, no I/O.

Byte layout (key; the value is empty)::

    offset 0   2 bytes  key group, uint16 BE (:mod:`.keygroup_prefix`)
    offset 2   3 bytes  [0x02][0xFF 0x54]: the keyed-state name part (:mod:`.keyed`) of the
                        reserved name ``b"\\xffT"`` (:data:`TIMER_STATE_NAME`)
    offset 5   1 byte   domain: 0 = event time, 1 = processing time
    offset 6   8 bytes  timestamp: (ts + 2^63) uint64 BE
    offset 14  ...      key bytes (:mod:`spark_state.process.keycodec`), to the end of the key

* A timer is an entry of its key's key group, so a rescale moves it with the key group's
  range like any keyed state.
* A state name is a ``str`` and its UTF-8 bytes never contain 0xFF, so no user state can
  have the reserved name; it also never has a schema record or a TTL marker.
* The timestamp is epoch milliseconds offset by 2^63, so that negative times sort before
  positive ones in the bytes' order: one scan of ``[domain prefix, domain prefix + ts(bound + 1))``
  yields the due timers in time order (then key order).
"""

from __future__ import annotations

import struct

from .keyed import key_group_bytes, name_part
from .keygroup_prefix import KEY_GROUP

__all__ = [
    "TIMER_STATE_NAME",
    "EVENT_TIME",
    "PROCESSING_TIME",
    "MIN_TIMESTAMP",
    "MAX_TIMESTAMP",
    "TIMESTAMP",
    "HEADER_BYTES",
    "encode_timestamp",
    "decode_timestamp",
    "domain_prefix",
    "domain_end",
    "timer_key",
    "split_timer_key",
    "timestamp_and_key",
]

#: Reserved keyed-state name timers are stored under, in each key group; not valid UTF-8,
#: so no user state name can equal it.
TIMER_STATE_NAME = b"\xffT"
#: Timer domains (the byte after the name part).
EVENT_TIME = 0
PROCESSING_TIME = 1
MIN_TIMESTAMP = -(1 << 63)
MAX_TIMESTAMP = (1 << 63) - 1

#: The timestamp field: (ts + 2^63) as uint64 BE.
TIMESTAMP = struct.Struct(">Q")
_OFFSET = 1 << 63
_NAME_PART = name_part(TIMER_STATE_NAME)
#: Bytes before the timestamp: key group, name part, domain.
HEADER_BYTES = KEY_GROUP.size + len(_NAME_PART) + 1


def encode_timestamp(ts: int) -> bytes:
    """8 bytes whose order is the order of ``ts`` (signed epoch milliseconds)."""
    return TIMESTAMP.pack(ts + _OFFSET)


def decode_timestamp(data: bytes, offset: int = 0) -> int:
    """The timestamp encoded at ``offset`` of ``data``."""
    return TIMESTAMP.unpack_from(data, offset)[0] - _OFFSET


def domain_prefix(key_group: int, domain: int) -> bytes:
    """The prefix of every timer of ``domain`` in ``key_group``."""
    return key_group_bytes(key_group) + _NAME_PART + bytes((domain,))


def domain_end(key_group: int, domain: int, bound: int) -> bytes:
    """Exclusive end of the timers of ``domain`` in ``key_group`` with ``timestamp <= bound``."""
    if bound < MAX_TIMESTAMP:
        return domain_prefix(key_group, domain) + encode_timestamp(bound + 1)
    return domain_prefix(key_group, domain + 1)  # the domain is the prefix's last byte


def timer_key(key_group: int, domain: int, ts: int, key: bytes) -> bytes:
    """The entry of one timer (see the module docstring)."""
    return domain_prefix(key_group, domain) + encode_timestamp(ts) + key


def split_timer_key(entry: bytes) -> tuple[int, int, int, bytes]:
    """``(key group, domain, timestamp, key bytes)`` of a timer entry."""
    return (KEY_GROUP.unpack_from(entry)[0], entry[HEADER_BYTES - 1], decode_timestamp(entry, HEADER_BYTES),
            entry[HEADER_BYTES + TIMESTAMP.size:])


def timestamp_and_key(entry: bytes, prefix_len: int = HEADER_BYTES) -> tuple[int, bytes]:
    """``(timestamp, key bytes)`` of a timer entry whose domain prefix is ``prefix_len`` bytes long."""
    return TIMESTAMP.unpack_from(entry, prefix_len)[0] - _OFFSET, entry[prefix_len + TIMESTAMP.size:]
