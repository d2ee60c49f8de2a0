"""One epoch's writes as a commit consumes them, in two forms.

A commit needs four things of an epoch (:meth:`spark_state.engine.store.VersionedStore.commit`): its
changelog, how many puts and deletes it holds, how many of its keys exist in committed state
(the exact key count: a put of a new key adds one, a delete of an existing key removes one), and
the ``(key, value or None)`` pairs to apply to the local backend.

* :class:`OverlayWrites` -- the writes staged key by key in the :class:`~spark_state.engine.overlay.WriteOverlay`
  (the engine API, ``keyed_process``, TTL's staging), all in memory.
* :class:`SpilledWrites` -- the same when the overlay spilled: the epoch is read from its runs on
  local disk (:mod:`.spill`), in ascending key order, a record batch at a time, once per step.
* :class:`ArrowWrites` -- the epoch whole, as Arrow columns: what the provider's shim ships,
  one row per key with its last write. The changelog, the counts and the known existence come
  from the columns in C; keys and values become Python objects once, for the backend, which
  applies them without a loop per key in Python (``KVBackend.apply_distinct``). Building
  the overlay's dicts for the same rows cost the provider's commit about as much as RocksDB's
  write of them (``bench/commit_profile.py``). Every step goes record batch by record batch
  (at most ``constants.ARROW_BATCH_ROWS`` rows), so an epoch of any size -- the shim's file is
  memory-mapped -- is committed in memory that follows one batch: the changelog is written as
  it is encoded (:meth:`EpochWrites.write_changelog`), and the backend takes one write batch
  per record batch (a commit that fails half-way forgets the local copy, :mod:`.commit`).

Invariants of both: one entry per key (the epoch's last write), ``None`` / null value = delete,
and no key of the engine's system keyspace (``keys.system.SYSTEM_PREFIX``) counted as a user
key.
"""

from __future__ import annotations

import itertools
import operator
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterator, Optional, Sequence, cast

import pyarrow as pa
import pyarrow.compute as pc

from .. import constants as C
from ..arrow_chunks import chunks
from ..keys.system import SYSTEM_PREFIX
from ..backends.base import KVBackend
from ..checkpoint import changelog
from . import spill
from .overlay import WriteOverlay

#: ``count_existing(keys)``: how many of ``keys`` exist in committed state (one batched lookup).
CountExisting = Callable[[Sequence[bytes]], int]


def _distinct(keys: pa.ChunkedArray) -> bool:
    """Whether no key repeats: one comparison of neighbours when the keys ascend (the shim writes
    an epoch's keys sorted), a hash of every key otherwise."""
    n = len(keys)
    if n < 2 or pc.all(pc.less(keys.slice(0, n - 1), keys.slice(1))).as_py():
        return True
    return len(pc.unique(keys)) == n


class EpochWrites(ABC):
    """What a commit reads of one epoch's writes."""

    @property
    @abstractmethod
    def num_deletes(self) -> int: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    def num_puts(self) -> int:
        return len(self) - self.num_deletes

    @abstractmethod
    def write_changelog(self, version: int, sink: Any) -> None:
        """Write the changelog of ``version`` (:mod:`spark_state.checkpoint.changelog`) to ``sink``,
        a writable binary file object."""

    @abstractmethod
    def user_puts(self) -> int:
        """Puts of keys outside the system keyspace."""

    @abstractmethod
    def existing_user_keys(self, count_existing: CountExisting) -> int:
        """How many written keys outside the system keyspace exist in committed state."""

    @abstractmethod
    def apply_to(self, backend: KVBackend) -> None:
        """Apply the writes to ``backend`` in one atomic batch."""


class OverlayWrites(EpochWrites):
    """The writes staged in a :class:`WriteOverlay`."""

    def __init__(self, overlay: WriteOverlay) -> None:
        self._overlay = overlay
        self._changes = overlay.changes()
        self._deletes: Optional[int] = None

    def __len__(self) -> int:
        return len(self._changes)

    @property
    def num_deletes(self) -> int:
        if self._deletes is None:
            self._deletes = list(self._changes.values()).count(None)  # a C loop: runs over every key
        return self._deletes

    def write_changelog(self, version: int, sink: Any) -> None:
        changelog.write(version, changelog.batches_of(self._changes), sink)

    def user_puts(self) -> int:
        changes = self._changes
        puts = self.num_puts
        if changes and max(changes) >= SYSTEM_PREFIX:
            puts -= sum(1 for k, v in changes.items() if v is not None and k[:1] == SYSTEM_PREFIX)
        return puts

    def existing_user_keys(self, count_existing: CountExisting) -> int:
        return self._overlay.count_committed(count_existing)

    def apply_to(self, backend: KVBackend) -> None:
        # As columns (the dict's keys are distinct), split into puts and deletes by C loops:
        # the backend applies them without bytecode per key (KVBackend.apply_distinct).
        changes = self._changes
        keys, values = list(changes), list(changes.values())
        if not self.num_deletes:
            backend.apply_distinct(keys, cast("list[bytes]", values), [])
            return
        is_put = list(map(operator.is_not, values, itertools.repeat(None)))
        put_values = cast("list[bytes]", list(itertools.compress(values, is_put)))
        backend.apply_distinct(list(itertools.compress(keys, is_put)), put_values,
                               list(itertools.compress(keys, map(operator.not_, is_put))))


class SpilledWrites(EpochWrites):
    """The writes of an overlay that spilled: what its dict still holds becomes the last run, and
    every step reads the runs' one ordered pass in batches of ``constants.ARROW_BATCH_ROWS``."""

    def __init__(self, overlay: WriteOverlay) -> None:
        overlay.spill_all()
        spill = overlay.spill
        assert spill is not None
        self._spill = spill
        self._counts: Optional[tuple[int, int, int]] = None  # rows, deletes, user puts

    def _chunks(self) -> Iterator[list[tuple[bytes, bytes]]]:
        return chunks(self._spill.items(), C.ARROW_BATCH_ROWS)

    def _count(self) -> tuple[int, int, int]:
        if self._counts is None:
            rows = deletes = system_puts = 0
            for chunk in self._chunks():
                rows += len(chunk)
                deletes += sum(1 for _, e in chunk if e[0] == spill.OP_DELETE)
                system_puts += sum(1 for k, e in chunk if e[0] == spill.OP_PUT and k[:1] == SYSTEM_PREFIX)
            self._counts = (rows, deletes, rows - deletes - system_puts)
        return self._counts

    def __len__(self) -> int:
        return self._count()[0]

    @property
    def num_deletes(self) -> int:
        return self._count()[1]

    def write_changelog(self, version: int, sink: Any) -> None:
        def batches() -> Iterator[tuple[pa.Array, pa.Array]]:
            for chunk in self._chunks():
                yield (pa.array([k for k, _ in chunk], pa.binary()),
                       pa.array([spill.decode_value(e) for _, e in chunk], pa.binary()))

        changelog.write(version, batches(), sink)

    def user_puts(self) -> int:
        return self._count()[2]

    def existing_user_keys(self, count_existing: CountExisting) -> int:
        total = 0
        for chunk in self._chunks():
            user = [(k, e[1]) for k, e in chunk if k[:1] != SYSTEM_PREFIX]
            total += sum(1 for _, prior in user if prior == 1)
            unknown = [k for k, prior in user if prior == spill.PRIOR_UNKNOWN]
            if unknown:
                total += count_existing(unknown)
        return total

    def apply_to(self, backend: KVBackend) -> None:
        """One write batch per chunk (not atomic as a whole: the commit forgets the local copy if it fails)."""
        for chunk in self._chunks():
            backend.apply_distinct([k for k, e in chunk if e[0] == spill.OP_PUT],
                                   [e[spill.HEADER_BYTES:] for _, e in chunk if e[0] == spill.OP_PUT],
                                   [k for k, e in chunk if e[0] == spill.OP_DELETE])


class ArrowWrites(EpochWrites):
    """An epoch's writes as Arrow columns, built with :meth:`of` (which checks the invariants)."""

    def __init__(self, table: pa.Table) -> None:
        #: columns key, value (null: delete), existed (1 / 0 / -1 or null: unknown)
        self._table = table

    @classmethod
    def of(cls, keys: pa.ChunkedArray, values: pa.ChunkedArray,
           existed: Optional[pa.ChunkedArray] = None) -> Optional["ArrowWrites"]:
        """The writes ``keys[i] -> values[i]`` (null: delete); ``existed[i]`` 1 / 0 if the key
        existed / did not before the epoch, -1 or null if unknown. None when this form does not
        apply -- a key written twice (the last write would have to win) or a system key -- and
        the caller stages the rows in the overlay instead."""
        if not (len(keys) == len(values) and (existed is None or len(existed) == len(keys))):
            raise ValueError(f"columns of different lengths: {len(keys)} keys, {len(values)} values, "
                             f"{'-' if existed is None else len(existed)} existence flags")
        if keys.null_count:
            raise ValueError(f"{keys.null_count} null keys among an epoch's writes")
        # (The scalar is made here, not at import: see spark_state.provider.no_pandas.)
        system = pa.scalar(SYSTEM_PREFIX, pa.binary())
        if len(keys) and (not _distinct(keys) or pc.any(pc.greater_equal(keys, system)).as_py()):
            return None
        if existed is None:
            existed = pa.chunked_array([pa.nulls(len(keys), pa.int8())])
        return cls(pa.Table.from_arrays([keys, values, existed], names=["key", "value", "existed"]))

    def _batches(self) -> Iterator[pa.RecordBatch]:
        return iter(self._table.to_batches(max_chunksize=C.ARROW_BATCH_ROWS))

    def __len__(self) -> int:
        return self._table.num_rows

    @property
    def num_deletes(self) -> int:
        return self._table.column("value").null_count

    def write_changelog(self, version: int, sink: Any) -> None:
        changelog.write(version, ((b.column(0), b.column(1)) for b in self._batches()), sink)

    def user_puts(self) -> int:
        return self.num_puts  # `of` admits no system keys

    def existing_user_keys(self, count_existing: CountExisting) -> int:
        total = 0
        for batch in self._batches():
            existed = batch.column(2)
            total += pc.sum(pc.equal(existed, 1)).as_py() or 0
            unknown = pc.or_kleene(pc.is_null(existed), pc.equal(existed, -1))
            if pc.any(unknown).as_py():
                total += count_existing(pc.filter(batch.column(0), unknown).to_pylist())
        return total

    def apply_to(self, backend: KVBackend) -> None:
        """One write batch per record batch: not atomic as a whole (the commit forgets the local copy
        if it fails), but memory follows one record batch."""
        for batch in self._batches():
            keys, values = batch.column(0), batch.column(1)
            if values.null_count:
                puts = pc.is_valid(values)
                backend.apply_distinct(pc.filter(keys, puts).to_pylist(), pc.filter(values, puts).to_pylist(),
                                       pc.filter(keys, pc.invert(puts)).to_pylist())
            else:
                backend.apply_distinct(keys.to_pylist(), values.to_pylist(), [])


def reject_write(key: object, value: object) -> None:
    """A write that could not be committed: say so now, not at commit with an Arrow error."""
    if value is None:
        raise TypeError("value must be bytes; use delete() to remove a key")
    for what, obj in (("key", key), ("value", value)):
        if type(obj) is not bytes:
            hint = " (encode text, e.g. .encode('utf-8'))" if isinstance(obj, str) else \
                " (serialize it first; spark_state.state has typed serializers)" if not isinstance(
                    obj, (bytearray, memoryview)) else " (pass bytes(...))"
            raise TypeError(f"store {what}s must be bytes, got {type(obj).__name__} {obj!r:.60}{hint}")
