"""Timers of keyed functions, stored per key group next to the keys' state.

A timer is a ``(key, timestamp, domain)`` triple, at most one per triple (Flink's rule:
registering it again changes nothing). Timers live in the partition's store, in the key
group of their key, under a reserved state name, so that:

* a key group's timers are one contiguous key range inside the key group's range, so a
  rescale moves them with :func:`~spark_state.state.rescale.copy_key_groups` like any state;
* one range scan per key group and domain yields the due timers in time order;
* registering, deleting and the existence check are single-key operations (the entry *is*
  the timer), so no reverse index is needed.

Byte layout: :mod:`spark_state.keys.timers` (``[key group][reserved name part][domain]
[timestamp + 2^63][key bytes]``, value empty).

Invariant: every entry lies inside its key group's range ``[kg u16]...``, and the key group
is the one of its key (the runtime registers timers for the current key only).
"""

from __future__ import annotations

from typing import Iterator, Optional

from ..keys.timers import (
    EVENT_TIME,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    PROCESSING_TIME,
    domain_end,
    domain_prefix,
    timer_key,
    timestamp_and_key,
)
from ..engine.store import VersionedStore

__all__ = ["EVENT_TIME", "PROCESSING_TIME", "DOMAINS", "DOMAIN_NAMES", "MIN_TIMESTAMP", "MAX_TIMESTAMP",
           "TimerQueue", "check_timestamp"]

DOMAINS = (EVENT_TIME, PROCESSING_TIME)
DOMAIN_NAMES = {EVENT_TIME: "event time", PROCESSING_TIME: "processing time"}


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
        n = len(prefix)
        for entry, _ in self._store.iterate(prefix, domain_end(key_group, domain, bound)):
            yield timestamp_and_key(entry, n)

    def earliest(self, key_group: int, domain: int) -> Optional[int]:
        """The earliest timer of ``domain`` in ``key_group`` (one seek), or None."""
        prefix = domain_prefix(key_group, domain)
        for entry, _ in self._store.iterate(prefix, domain_end(key_group, domain, MAX_TIMESTAMP)):
            return timestamp_and_key(entry, len(prefix))[0]
        return None

    def timers_of(self, key_group: int, key: bytes, domain: Optional[int] = None) -> list[tuple[int, int]]:
        """``(domain, timestamp)`` of every timer of one key (a scan of its key group's
        timers: for inspection and tests, not for hot paths)."""
        out = []
        for d in DOMAINS if domain is None else (domain,):
            for ts, k in self.due(key_group, d, MAX_TIMESTAMP):
                if k == key:
                    out.append((d, ts))
        return out
