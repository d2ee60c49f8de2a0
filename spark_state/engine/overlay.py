"""Uncommitted writes of one epoch, with read-your-writes and ordered scans, in bounded memory.

A dict ``key -> value`` where ``None`` marks a delete (a tombstone that hides the
committed value). Only the last write per key is kept: that is also exactly what the
epoch's changelog records.

The overlay also remembers, for keys read from committed state this epoch, whether they
existed. Stateful operators read a key before they write it, so at commit the exact key
count usually needs no extra lookups (Spark's RocksDB provider pays one get per put for
the same number). A sorted key index is built on the first ordered scan and
then maintained incrementally, so epochs that never scan pay nothing for it.

Memory. With a ``limit_bytes``, the overlay estimates what its dicts hold at check points
spaced so that the estimate costs O(1) per write on average; past the limit it spills: its
writes, sorted and each with its prior existence, become one run of
:class:`~spark_state.engine.spill.SpillRuns` on local disk, and the dicts start empty. Reads
then ask the dict, then the runs, then committed state; ordered scans merge the runs in; the
commit reads the epoch from the runs in record batches
(:class:`~spark_state.engine.epoch_writes.SpilledWrites`). An epoch that stays under the limit
never touches disk and pays one length check per write.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from typing import Callable, Iterable, Iterator, Optional, Sequence

import rocksdict

from ..keys.system import SYSTEM_PREFIX
from . import spill as S
from .spill import SpillRuns

_MISSING = object()
#: The flags of :meth:`WriteOverlay.count_committed` that say nothing of a key's existence.
_UNKNOWN = (None, -1)

#: Bytes a dict entry of the overlay costs beyond its key and value (two bytes objects' headers, the
#: dict's slot and index): what the memory estimate adds per entry.
ENTRY_OVERHEAD = 120
#: Writes between memory checks, at least (the estimate reads every entry's length), unless the
#: limit holds fewer entries than that.
_MIN_CHECK_STEP = 4096


class WriteOverlay:
    __slots__ = ("_changes", "_sorted", "_prior", "_limit", "_spill_parent", "_cache", "_spill", "_next_check",
                 "_max_prior", "_min_step", "_peak_bytes", "last_peak_bytes")

    #: The most read results (what committed state held for a key) an epoch remembers beside its
    #: writes; the JVM's ``ChangeBuffer.MaxRememberedReads`` is the same bound (a unit test compares
    #: them). A count, beside the byte bound the spill limit gives (at most half the limit's worth of
    #: entries), so that an epoch without a limit cannot grow it without bound either; past it a read
    #: is not remembered and the commit looks the key up again. 2M: an epoch that reads and writes a
    #: million distinct keys, twice a large batch's, remembers every read.
    MAX_REMEMBERED_READS = 1 << 21

    def __init__(self, limit_bytes: Optional[int] = None, spill_parent: Optional[Callable[[], str]] = None,
                 cache: Optional[rocksdict.Cache] = None) -> None:
        """``limit_bytes``: spill past this estimate (None: never); ``spill_parent()``: the local
        directory spill runs go in (asked at the first spill); ``cache``: the RocksDB block cache
        they read through."""
        self._changes: dict[bytes, Optional[bytes]] = {}
        self._sorted: Optional[list[bytes]] = None
        #: key -> True/1 existed, False/0 did not, -1 unknown (note_committed_many)
        self._prior: dict[bytes, int] = {}
        self._limit = limit_bytes
        self._spill_parent = spill_parent
        self._cache = cache
        self._spill: Optional[SpillRuns] = None
        self._min_step = 1 << 62 if limit_bytes is None else \
            max(16, min(_MIN_CHECK_STEP, limit_bytes // (4 * ENTRY_OVERHEAD)))
        self._next_check = self._min_step
        self._max_prior = self.MAX_REMEMBERED_READS if limit_bytes is None else \
            max(self._min_step, min(self.MAX_REMEMBERED_READS, limit_bytes // (2 * ENTRY_OVERHEAD)))
        #: the largest estimate (:meth:`estimated_bytes`) seen at a memory check of the current epoch,
        #: and that of the epoch the last :meth:`clear` ended
        self._peak_bytes = 0
        self.last_peak_bytes = 0

    def __len__(self) -> int:
        """Writes in the dict plus entries spilled (a key spilled twice counts twice): 0 iff nothing is pending."""
        spilled = self._spill.entries if self._spill is not None else 0
        return len(self._changes) + spilled

    @property
    def spill(self) -> Optional[SpillRuns]:
        """The runs spilled this epoch (None: none)."""
        return self._spill

    def lookup(self, key: bytes) -> object:
        """The pending value, ``None`` for a pending delete, or ``MISSING`` if untouched."""
        value = self._changes.get(key, _MISSING)
        if value is _MISSING and self._spill is not None:
            entry = self._spill.get(key)
            if entry is not None:
                return S.decode_value(entry)
        return value

    def put(self, key: bytes, value: Optional[bytes]) -> None:
        changes = self._changes
        if self._sorted is not None and key not in changes:
            bisect.insort(self._sorted, key)
        changes[key] = value
        if len(changes) >= self._next_check:
            self._check_memory()

    def put_many(self, pairs: Iterable[tuple[bytes, Optional[bytes]]]) -> None:
        if self._sorted is None:
            self._changes.update(pairs)
        else:
            for key, value in pairs:
                self.put(key, value)
        if len(self._changes) >= self._next_check:
            self._check_memory()

    def changes(self) -> dict[bytes, Optional[bytes]]:
        """The writes held in memory (all of them unless :attr:`spill` is set)."""
        return self._changes

    def note_committed(self, key: bytes, exists: bool) -> None:
        """Remember whether ``key`` exists in committed state (learnt from a read)."""
        if len(self._prior) < self._max_prior:
            self._prior[key] = exists

    def note_committed_many(self, keys: Sequence[bytes], flags: Sequence[int]) -> None:
        """``note_committed`` for many keys at once: ``flags`` 1 / 0 (existed / did not),
        -1 unknown (nothing noted). Runs at C speed: an epoch shipped by the JVM notes one
        flag per written key."""
        prior = self._prior
        room = self._max_prior - len(prior)
        if room >= len(keys):
            prior.update(zip(keys, flags))  # -1 is stored too and means "unknown" (count_committed)
        else:
            for key, flag in zip(keys[:max(room, 0)], flags):
                if flag >= 0:
                    prior[key] = bool(flag)

    def count_committed(self, count_existing: Callable[[list[bytes]], int]) -> int:
        """How many changed keys exist in committed state; ``count_existing`` is asked
        only about keys whose existence no read of this epoch revealed (the writes in memory:
        a spilled epoch counts through its runs)."""
        changes = self._changes
        if not changes:
            return 0
        # Flags per changed key: True/1 existed, False/0 did not, None/-1 unknown. Counted
        # with list methods (C loops): this runs over every key of every commit.
        flags: list[Optional[int]] = list(map(self._prior.get, changes))
        known = flags.count(True)  # counts 1 as well (1 == True)
        if flags.count(None) + flags.count(-1):
            unknown = list(itertools.compress(changes, map(_UNKNOWN.__contains__, flags)))
        else:
            unknown = []
        if max(changes) >= SYSTEM_PREFIX:  # system keys are not counted (see VersionedStore.num_keys)
            known -= sum(1 for k, f in zip(changes, flags) if f == 1 and k[:1] == SYSTEM_PREFIX)
            unknown = [k for k in unknown if k[:1] != SYSTEM_PREFIX]
        return known + (count_existing(unknown) if unknown else 0)

    def clear(self) -> None:
        # The epoch's last writes came after its last memory check: count them in.
        self.last_peak_bytes = max(self._peak_bytes, self.estimated_bytes() if self._changes else 0)
        self._peak_bytes = 0
        self._changes = {}
        self._sorted = None
        self._prior = {}
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._next_check = self._min_step

    def sorted_items(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[tuple[bytes, Optional[bytes]]]:
        """Pending ``(key, value-or-None)`` with ``start <= key < end``, ascending."""
        in_memory = self._sorted_in_memory(start, end)
        if self._spill is None:
            return in_memory
        spilled = ((k, S.decode_value(e)) for k, e in self._spill.items(start, end))
        return _newest_first(in_memory, spilled)

    def _sorted_in_memory(self, start: Optional[bytes],
                          end: Optional[bytes]) -> Iterator[tuple[bytes, Optional[bytes]]]:
        if not self._changes:
            return iter(())
        if self._sorted is None:
            self._sorted = sorted(self._changes)
        keys = self._sorted
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        changes = self._changes
        return iter([(k, changes[k]) for k in keys[lo:hi]])

    # ------------------------------------------------------------------ memory
    def estimated_bytes(self) -> int:
        """What the dicts hold, estimated: keys, values and :data:`ENTRY_OVERHEAD` per entry."""
        changes, prior = self._changes, self._prior
        data = sum(map(len, changes)) + sum(map(len, filter(None, changes.values())))  # C loops (None: a delete)
        return data + sum(map(len, prior)) + (len(changes) + len(prior)) * ENTRY_OVERHEAD

    def _check_memory(self) -> None:
        assert self._limit is not None
        held = self.estimated_bytes()
        entries = len(self._changes)
        self._peak_bytes = max(self._peak_bytes, held)
        if held >= self._limit:
            self.spill_all()
            held, entries = 0, 0
        # Next check about when the dict would reach the limit at this entry size, in steps of at
        # least _min_step: the estimate's O(n) is paid O(1) times per limit's worth of writes.
        per_entry = held / entries if entries else ENTRY_OVERHEAD + 64
        room = int((self._limit - held) / per_entry)
        self._next_check = entries + max(self._min_step, room // 2)

    def spill_all(self) -> None:
        """Write what the dict holds as one run (with each key's prior existence) and empty it."""
        if not self._changes:
            return
        if self._spill is None:
            if self._spill_parent is None:
                raise RuntimeError("this overlay has no directory to spill to")
            self._spill = SpillRuns(self._spill_parent(), self._cache)
        prior = self._prior.get
        changes = self._changes

        def entries() -> Iterator[tuple[bytes, bytes]]:
            for key in sorted(changes):
                flag = prior(key)
                yield key, S.encode(changes[key], S.PRIOR_UNKNOWN if flag is None or flag == -1 else int(flag))

        self._spill.write_run(entries())
        self._changes = {}
        self._sorted = None
        self._prior = {}


def _newest_first(newer: Iterator[tuple[bytes, Optional[bytes]]],
                  older: Iterator[tuple[bytes, Optional[bytes]]]) -> Iterator[tuple[bytes, Optional[bytes]]]:
    """Two ascending ``(key, value)`` streams merged; on equal keys ``newer``'s entry wins."""
    last: Optional[bytes] = None
    # heapq.merge is stable: for equal keys the entry of the earlier iterable comes first.
    for key, value in heapq.merge(newer, older, key=lambda kv: kv[0]):
        if key == last:
            continue
        last = key
        yield key, value


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
