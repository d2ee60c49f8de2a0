"""One epoch's writes as a commit consumes them, in two forms.

A commit needs four things of an epoch (:meth:`spark_state.engine.store.VersionedStore.commit`): its
changelog, how many puts and deletes it holds, how many of its keys exist in committed state
(the exact key count: a put of a new key adds one, a delete of an existing key removes one), and
the ``(key, value or None)`` pairs to apply to the local backend.

* :class:`OverlayWrites` -- the writes staged key by key in the :class:`~spark_state.engine.overlay.WriteOverlay`
  (the engine API, ``keyed_process``, TTL's staging).
* :class:`ArrowWrites` -- the epoch whole, as Arrow columns: what the provider's shim ships,
  one row per key with its last write. The changelog, the counts and the known existence come
  from the columns in C; keys and values become Python objects once, for the backend, which
  applies them without a loop per key in Python (``KVBackend.apply_distinct``). Building
  the overlay's dicts for the same rows cost the provider's commit about as much as RocksDB's
  write of them (``bench/commit_profile.py``).

Invariants of both: one entry per key (the epoch's last write), ``None`` / null value = delete,
and no key of the engine's system keyspace (``keys.system.SYSTEM_PREFIX``) counted as a user
key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..keys.system import SYSTEM_PREFIX
from ..backends.base import KVBackend
from ..checkpoint import changelog
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
    def encode_changelog(self, version: int) -> bytes:
        """The changelog of ``version`` (:mod:`spark_state.checkpoint.changelog`)."""

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

    def encode_changelog(self, version: int) -> bytes:
        return changelog.encode(version, self._changes)

    def user_puts(self) -> int:
        changes = self._changes
        puts = self.num_puts
        if changes and max(changes) >= SYSTEM_PREFIX:
            puts -= sum(1 for k, v in changes.items() if v is not None and k[:1] == SYSTEM_PREFIX)
        return puts

    def existing_user_keys(self, count_existing: CountExisting) -> int:
        return self._overlay.count_committed(count_existing)

    def apply_to(self, backend: KVBackend) -> None:
        backend.apply(self._changes.items())


class ArrowWrites(EpochWrites):
    """An epoch's writes as Arrow columns, built with :meth:`of` (which checks the invariants)."""

    def __init__(self, keys: pa.ChunkedArray, values: pa.ChunkedArray, existed: pa.ChunkedArray) -> None:
        self._keys = keys
        self._values = values
        self._existed = existed

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
        return cls(keys, values, existed)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def num_deletes(self) -> int:
        return self._values.null_count

    def encode_changelog(self, version: int) -> bytes:
        return changelog.encode_columns(version, self._keys, self._values)

    def user_puts(self) -> int:
        return self.num_puts  # `of` admits no system keys

    def existing_user_keys(self, count_existing: CountExisting) -> int:
        if not len(self._keys):
            return 0
        known = pc.sum(pc.equal(self._existed, 1)).as_py() or 0
        unknown = pc.or_kleene(pc.is_null(self._existed), pc.equal(self._existed, -1))
        if not pc.any(unknown).as_py():
            return known
        return known + count_existing(pc.filter(self._keys, unknown).to_pylist())

    def apply_to(self, backend: KVBackend) -> None:
        puts = pc.is_valid(self._values)
        if self.num_deletes:
            backend.apply_distinct(pc.filter(self._keys, puts).to_pylist(),
                                   pc.filter(self._values, puts).to_pylist(),
                                   pc.filter(self._keys, pc.invert(puts)).to_pylist())
        else:
            backend.apply_distinct(self._keys.to_pylist(), self._values.to_pylist(), [])


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
