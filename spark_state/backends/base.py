"""The key-value backend interface a versioned store keeps its committed state in.

A backend holds exactly one version of one store's state: the store applies each
committed epoch to it atomically and asks it for snapshots. It knows nothing about
versions, changelogs or checkpoint storage -- that policy lives in
:mod:`spark_state.engine.store` and :mod:`spark_state.checkpoint`.

Keys and values are ``bytes``. Iteration is in ascending unsigned-bytewise key order
(RocksDB's default comparator), so key-group prefixes keep each group contiguous.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Sequence

#: A change to apply: ``(key, value)`` puts, ``(key, None)`` deletes.
Change = tuple[bytes, Optional[bytes]]


@dataclass(frozen=True)
class SnapshotFile:
    """A file of a snapshot written into a local directory.

    ``shared`` files are immutable and identified by name for the life of a backend's
    local directory (RocksDB SSTs), so checkpoint storage may keep one copy for many
    snapshots. Non-shared files belong to one snapshot only.
    """

    name: str
    local_path: str
    size: int
    shared: bool


class UnsortedChangesError(ValueError):
    """Changes given to :meth:`KVBackend.apply_sorted` are not in strictly ascending key order;
    nothing was applied."""


class KVBackend(ABC):
    """One store's committed state, open on a local directory."""

    #: Registry name (``"rocksdb"`` / ``"hashmap"``); recorded in snapshots.
    name: str = ""

    @abstractmethod
    def get(self, key: bytes) -> Optional[bytes]:
        """The value of ``key``, or ``None``."""

    @abstractmethod
    def multi_get(self, keys: Sequence[bytes]) -> list[Optional[bytes]]:
        """Values of ``keys`` in order, ``None`` for absent keys."""

    def contains(self, key: bytes) -> bool:
        return self.get(key) is not None

    @abstractmethod
    def iterate(
        self, start: Optional[bytes] = None, end: Optional[bytes] = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < end`` in ascending key order (``None``: unbounded).

        The iterator sees the state as of the call; the caller must not apply changes
        while it is being consumed.
        """

    @abstractmethod
    def apply(self, changes: Iterable[Change]) -> None:
        """Apply puts and deletes atomically: all of them become visible, or none."""

    def apply_distinct(self, put_keys: list[bytes], put_values: list[bytes], delete_keys: list[bytes]) -> None:
        """:meth:`apply` for writes of distinct keys (no key among both lists or twice in one),
        given as columns: their order does not matter, so a backend may apply them without a
        Python-level loop per key."""
        self.apply(itertools.chain(zip(put_keys, put_values), zip(delete_keys, itertools.repeat(None))))

    def apply_sorted(self, batches: Iterable[tuple[list[bytes], list[Optional[bytes]]]], scratch_dir: str) -> None:
        """Apply the changes of ``batches`` (keys, values; None deletes) atomically, as
        :meth:`apply` does; a backend may rely on the keys ascending strictly across all
        batches (a changelog's order) and raise :class:`UnsortedChangesError` before anything
        is applied when they do not. ``scratch_dir`` is local disk the backend may write to."""
        self.apply(itertools.chain.from_iterable(zip(keys, values) for keys, values in batches))

    def count_existing(self, keys: Sequence[bytes]) -> int:
        """How many of ``keys`` (distinct) are present; used to keep an exact key count."""
        return sum(1 for v in self.multi_get(keys) if v is not None)

    @abstractmethod
    def memory_bytes(self) -> int:
        """Approximate memory held by this backend's data structures."""

    @abstractmethod
    def write_snapshot(self, directory: str) -> list[SnapshotFile]:
        """Write a consistent snapshot of the current state into the empty ``directory``."""

    @abstractmethod
    def close(self) -> None:
        """Release resources; the local directory may be deleted afterwards."""


class BackendFactory(ABC):
    """Opens backends of one kind on local directories."""

    name: str = ""

    @abstractmethod
    def create_empty(self, directory: str) -> KVBackend:
        """A new, empty backend in the (empty or missing) ``directory``."""

    @abstractmethod
    def open_snapshot(self, directory: str) -> KVBackend:
        """A backend opened on the files of a snapshot this factory's backend wrote,
        downloaded into ``directory`` (which it then owns)."""
