"""Timers of keyed functions, stored per key group next to the keys' state.

A timer is a ``(key, timestamp, domain)`` triple, at most one per triple (Flink's rule:
registering it again changes nothing). Timers live in the partition's store, in the key
group of their key, under a reserved state name, so that:

* a key group's timers are one contiguous key range inside the key group's range, so a
  rescale moves them with :func:`~spark_state.state.rescale.copy_key_groups` like any state;
* one range scan per key group and domain yields the due timers in time order;
* registering, deleting and the existence check are single-key operations (the entry *is*
  the timer), so no reverse index is needed.

Byte layout (key; the value is empty)::

    [key group u16 BE][0x02][0xFF 0x54][domain u8][timestamp: (ts + 2^63) u64 BE][key bytes]

* ``[0x02][0xFF 0x54]`` is the keyed-state name part (:mod:`.keys`) of the two-byte name
  ``b"\\xffT"``. A state name is a ``str`` and its UTF-8 bytes never contain 0xFF, so no user
  state can have this name; it also never has a schema record or a TTL marker.
* domain: 0 = event time, 1 = processing time (:data:`EVENT_TIME`, :data:`PROCESSING_TIME`).
* the timestamp is epoch milliseconds, offset by 2^63 so that negative times sort before
  positive ones in the bytes' order.
* the key bytes are the key encoding of :mod:`spark_state.process.keycodec` (they run to the
  end of the entry).

Invariant: every entry lies inside its key group's range ``[kg u16]...``, and the key group
is the one of its key (the runtime registers timers for the current key only).
"""

from __future__ import annotations

import struct
from typing import Iterator, Optional

from ..constants import TIMER_DOMAIN_EVENT_TIME, TIMER_DOMAIN_PROCESSING_TIME, TIMER_STATE_NAME
from ..engine.store import VersionedStore, prefix_upper_bound
from . import keys as K

EVENT_TIME = TIMER_DOMAIN_EVENT_TIME
PROCESSING_TIME = TIMER_DOMAIN_PROCESSING_TIME
DOMAINS = (EVENT_TIME, PROCESSING_TIME)
DOMAIN_NAMES = {EVENT_TIME: "event time", PROCESSING_TIME: "processing time"}

_NAME_PART = K.name_part(TIMER_STATE_NAME)
_TS = struct.Struct(">Q")
_OFFSET = 1 << 63
MIN_TIMESTAMP = -(1 << 63)
MAX_TIMESTAMP = (1 << 63) - 1


def encode_timestamp(ts: int) -> bytes:
    """8 bytes whose order is the order of ``ts`` (signed epoch milliseconds)."""
    return _TS.pack(ts + _OFFSET)


def decode_timestamp(data: bytes, offset: int = 0) -> int:
    return _TS.unpack_from(data, offset)[0] - _OFFSET


def domain_prefix(key_group: int, domain: int) -> bytes:
    """The prefix of every timer of ``domain`` in ``key_group``."""
    return K.key_group_bytes(key_group) + _NAME_PART + bytes((domain,))


def timer_key(key_group: int, domain: int, ts: int, key: bytes) -> bytes:
    """The entry of one timer (see the module docstring)."""
    return domain_prefix(key_group, domain) + encode_timestamp(ts) + key


_HEADER = 2 + len(_NAME_PART) + 1  # key group, name part, domain


def split_timer_key(entry: bytes) -> tuple[int, int, int, bytes]:
    """``(key group, domain, timestamp, key bytes)`` of a timer entry."""
    return (K.key_group_of(entry), entry[_HEADER - 1], decode_timestamp(entry, _HEADER), entry[_HEADER + 8:])


def check_timestamp(ts: object) -> int:
    """``ts`` as an int of epoch milliseconds, or a clear error."""
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise TypeError(f"timer timestamps are epoch milliseconds (int), got {ts!r} ({type(ts).__name__})")
    if not MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP:
        raise ValueError(f"timer timestamp {ts} is outside the signed 64-bit range")
    return ts


class TimerQueue:
    """The timers of one partition's store; writes go to the store's pending epoch, so a
    timer's registration, firing (deletion) and the state changes around it commit together."""

    def __init__(self, store: VersionedStore) -> None:
        self._store = store

    def register(self, key_group: int, key: bytes, domain: int, ts: int) -> None:
        """Add the timer; a no-op if it exists (the entry is the timer)."""
        self._store.put(timer_key(key_group, domain, ts, key), b"")

    def delete(self, key_group: int, key: bytes, domain: int, ts: int) -> None:
        """Remove the timer if it exists."""
        self._store.delete(timer_key(key_group, domain, ts, key))

    def exists(self, key_group: int, key: bytes, domain: int, ts: int) -> bool:
        return self._store.get(timer_key(key_group, domain, ts, key)) is not None

    def due(self, key_group: int, domain: int, bound: int) -> Iterator[tuple[int, bytes]]:
        """``(timestamp, key bytes)`` of every timer of ``domain`` in ``key_group`` with
        ``timestamp <= bound``, in time order (then key order)."""
        prefix = domain_prefix(key_group, domain)
        end = prefix + encode_timestamp(bound + 1) if bound < MAX_TIMESTAMP else prefix_upper_bound(prefix)
        n = len(prefix)
        for entry, _ in self._store.iterate(prefix, end):
            yield decode_timestamp(entry, n), entry[n + 8:]

    def timers_of(self, key_group: int, key: bytes, domain: Optional[int] = None) -> list[tuple[int, int]]:
        """``(domain, timestamp)`` of every timer of one key (a scan of its key group's
        timers: for inspection and tests, not for hot paths)."""
        out = []
        for d in DOMAINS if domain is None else (domain,):
            for ts, k in self.due(key_group, d, MAX_TIMESTAMP):
                if k == key:
                    out.append((d, ts))
        return out
