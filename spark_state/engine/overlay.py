"""Uncommitted writes of one epoch, with read-your-writes and ordered scans.

A dict ``key -> value`` where ``None`` marks a delete (a tombstone that hides the
committed value). Only the last write per key is kept: that is also exactly what the
epoch's changelog records.

The overlay also remembers, for keys read from committed state this epoch, whether they
existed. Stateful operators read a key before they write it, so at commit the exact key
count usually needs no extra lookups (Spark's RocksDB provider pays one get per put for
the same number). A sorted key index is built on the first ordered scan and
then maintained incrementally, so epochs that never scan pay nothing for it.
"""

from __future__ import annotations

import bisect
from typing import Callable, Iterable, Iterator, Optional, Sequence

from ..keys.system import SYSTEM_PREFIX

_MISSING = object()


class WriteOverlay:
    __slots__ = ("_changes", "_sorted", "_prior")

    #: Bound on remembered read results, so read-heavy epochs cannot grow it without limit.
    MAX_REMEMBERED_READS = 1 << 20

    def __init__(self) -> None:
        self._changes: dict[bytes, Optional[bytes]] = {}
        self._sorted: Optional[list[bytes]] = None
        #: key -> True/1 existed, False/0 did not, -1 unknown (note_committed_many)
        self._prior: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._changes)

    def lookup(self, key: bytes) -> object:
        """The pending value, ``None`` for a pending delete, or ``MISSING`` if untouched."""
        return self._changes.get(key, _MISSING)

    def put(self, key: bytes, value: Optional[bytes]) -> None:
        changes = self._changes
        if self._sorted is not None and key not in changes:
            bisect.insort(self._sorted, key)
        changes[key] = value

    def put_many(self, pairs: Iterable[tuple[bytes, Optional[bytes]]]) -> None:
        if self._sorted is None:
            self._changes.update(pairs)
        else:
            for key, value in pairs:
                self.put(key, value)

    def changes(self) -> dict[bytes, Optional[bytes]]:
        return self._changes

    def note_committed(self, key: bytes, exists: bool) -> None:
        """Remember whether ``key`` exists in committed state (learnt from a read)."""
        if len(self._prior) < self.MAX_REMEMBERED_READS:
            self._prior[key] = exists

    def note_committed_many(self, keys: Sequence[bytes], flags: Sequence[int]) -> None:
        """``note_committed`` for many keys at once: ``flags`` 1 / 0 (existed / did not),
        -1 unknown (nothing noted). Runs at C speed: an epoch shipped by the JVM notes one
        flag per written key."""
        prior = self._prior
        room = self.MAX_REMEMBERED_READS - len(prior)
        if room >= len(keys):
            prior.update(zip(keys, flags))  # -1 is stored too and means "unknown" (count_committed)
        else:
            for key, flag in zip(keys[:max(room, 0)], flags):
                if flag >= 0:
                    prior[key] = bool(flag)

    def count_committed(self, count_existing: Callable[[list[bytes]], int]) -> int:
        """How many changed keys exist in committed state; ``count_existing`` is asked
        only about keys whose existence no read of this epoch revealed."""
        changes = self._changes
        if not changes:
            return 0
        # Flags per changed key: True/1 existed, False/0 did not, None/-1 unknown. Counted
        # with list methods (C loops): this runs over every key of every commit.
        flags: list[Optional[int]] = list(map(self._prior.get, changes))
        known = flags.count(True)  # counts 1 as well (1 == True)
        if flags.count(None) + flags.count(-1):
            unknown = [k for k, f in zip(changes, flags) if f is None or f == -1]
        else:
            unknown = []
        if max(changes) >= SYSTEM_PREFIX:  # system keys are not counted (see VersionedStore.num_keys)
            known -= sum(1 for k, f in zip(changes, flags) if f == 1 and k[:1] == SYSTEM_PREFIX)
            unknown = [k for k in unknown if k[:1] != SYSTEM_PREFIX]
        return known + (count_existing(unknown) if unknown else 0)

    def clear(self) -> None:
        self._changes = {}
        self._sorted = None
        self._prior = {}

    def sorted_items(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[tuple[bytes, Optional[bytes]]]:
        """Pending ``(key, value-or-None)`` with ``start <= key < end``, ascending."""
        if not self._changes:
            return iter(())
        if self._sorted is None:
            self._sorted = sorted(self._changes)
        keys = self._sorted
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        changes = self._changes
        return iter([(k, changes[k]) for k in keys[lo:hi]])


MISSING = _MISSING


def merge_sorted(
    committed: Iterator[tuple[bytes, bytes]],
    pending: Iterator[tuple[bytes, Optional[bytes]]],
) -> Iterator[tuple[bytes, bytes]]:
    """Merge committed entries with pending writes (pending wins; ``None`` deletes)."""
    sentinel = (None, None)
    c_key, c_val = next(committed, sentinel)
    p_key, p_val = next(pending, sentinel)
    while c_key is not None or p_key is not None:
        if p_key is None or (c_key is not None and c_key < p_key):
            yield c_key, c_val  # type: ignore[misc]
            c_key, c_val = next(committed, sentinel)
            continue
        if c_key == p_key:
            c_key, c_val = next(committed, sentinel)
        if p_val is not None:
            yield p_key, p_val
        p_key, p_val = next(pending, sentinel)
