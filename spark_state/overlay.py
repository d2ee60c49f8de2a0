"""Uncommitted writes of one epoch, with read-your-writes and ordered scans.

A dict ``key -> value`` where ``None`` marks a delete (a tombstone that hides the
committed value). Only the last write per key is kept: that is also exactly what the
epoch's changelog records. A sorted key index is built on the first ordered scan and
then maintained incrementally, so epochs that never scan pay nothing for it.
"""

from __future__ import annotations

import bisect
from typing import Iterable, Iterator, Optional

_MISSING = object()


class WriteOverlay:
    __slots__ = ("_changes", "_sorted")

    def __init__(self) -> None:
        self._changes: dict[bytes, Optional[bytes]] = {}
        self._sorted: Optional[list[bytes]] = None

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

    def clear(self) -> None:
        self._changes = {}
        self._sorted = None

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
