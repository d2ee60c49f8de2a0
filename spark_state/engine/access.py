"""Reads and writes of one epoch: the pending writes (:mod:`.overlay`) over the loaded version.

:class:`EpochAccess` is the part of :class:`~spark_state.engine.store.VersionedStore` that task
code calls per key or per batch: reads see this epoch's writes (read-your-writes), scans merge
them in key order, writes are only staged (the commit, :mod:`.commit`, makes them durable).
It is a base class of the store rather than an object the store calls, so a read or write
costs no extra call layer on the hot path; it reads the store's fields named below and sets
none of them except the overlay's contents.

Invariants: keys and values are ``bytes`` (anything else is rejected at once, with a hint,
not at commit with an Arrow error); a ``None`` value in the overlay is a delete; the key count
(:meth:`EpochAccess.num_keys`) is of committed user keys, outside ``keys.system.SYSTEM_PREFIX``.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Sequence

from ..backends import KVBackend
from ..errors import StoreStateError
from .epoch_writes import reject_write
from .overlay import MISSING, WriteOverlay, merge_sorted


class EpochAccess:
    """Reads and writes over ``_overlay`` (this epoch's writes) and ``_backend`` (the loaded
    version ``_version``, with ``_num_keys`` user keys), for a store that is not ``_closed``."""

    _overlay: WriteOverlay
    _backend: Optional[KVBackend]
    _version: Optional[int]
    _num_keys: int
    _closed: bool

    @property
    def has_uncommitted_changes(self) -> bool:
        return len(self._overlay) > 0

    # ------------------------------------------------------------------ reads
    def get(self, key: bytes) -> Optional[bytes]:
        overlay = self._overlay
        pending = overlay.lookup(key)
        if pending is not MISSING:
            return pending  # type: ignore[return-value]
        value = self._loaded_backend().get(key)
        overlay.note_committed(key, value is not None)
        return value

    def multi_get(self, keys: Sequence[bytes]) -> list[Optional[bytes]]:
        backend = self._loaded_backend()
        lookup = self._overlay.lookup
        pending = [lookup(k) for k in keys]
        missing = [k for k, p in zip(keys, pending) if p is MISSING]
        fetched = backend.multi_get(missing)
        note = self._overlay.note_committed
        for key, value in zip(missing, fetched):
            note(key, value is not None)
        it = iter(fetched)
        return [next(it) if p is MISSING else p for p in pending]  # type: ignore[misc]

    def contains(self, key: bytes) -> bool:
        return self.get(key) is not None

    def iterate(self, start: Optional[bytes] = None, end: Optional[bytes] = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < end`` (``None``: unbounded), ascending, including
        this epoch's uncommitted writes. Do not write while consuming the iterator."""
        backend = self._loaded_backend()
        committed = backend.iterate(start, end)
        if not len(self._overlay):
            return committed
        return merge_sorted(committed, self._overlay.sorted_items(start, end))

    def iterate_committed(self, start: Optional[bytes] = None,
                          end: Optional[bytes] = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries of the loaded version with ``start <= key < end``, ascending, without this
        epoch's writes. Staging writes while consuming it is safe: they go to the overlay, and the
        loaded version changes only when a commit applies them (or another version is loaded)."""
        return self._loaded_backend().iterate(start, end)

    def iterate_pending(self, start: Optional[bytes] = None,
                        end: Optional[bytes] = None) -> Iterator[tuple[bytes, Optional[bytes]]]:
        """This epoch's writes with ``start <= key < end``, ascending, as ``(key, value)`` with
        ``None`` for a delete. Do not write while consuming the iterator."""
        self._require_loaded()
        return self._overlay.sorted_items(start, end)

    def prefix_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries whose key starts with ``prefix``, ascending."""
        return self.iterate(prefix or None, prefix_upper_bound(prefix))

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self.iterate()

    def num_keys(self) -> int:
        """Number of committed keys outside the system keyspace (exact: maintained at every
        commit; see ``keys.system.SYSTEM_PREFIX``)."""
        self._require_loaded()
        return self._num_keys

    def memory_bytes(self) -> int:
        return self._loaded_backend().memory_bytes()

    def pending_peak_bytes(self) -> int:
        """The most the last finished epoch's pending writes held in memory (estimated; past the
        spill threshold they went to local disk)."""
        return self._overlay.last_peak_bytes

    # ------------------------------------------------------------------ writes
    def put(self, key: bytes, value: bytes) -> None:
        if type(key) is not bytes or type(value) is not bytes:
            reject_write(key, value)
        self._require_loaded()
        self._overlay.put(key, value)

    def delete(self, key: bytes) -> None:
        if type(key) is not bytes:
            reject_write(key, b"")
        self._require_loaded()
        self._overlay.put(key, None)

    def put_many(self, keys: Iterable[bytes], values: Iterable[bytes]) -> None:
        """Stage many puts at once (cheaper than a loop of ``put``)."""
        self._require_loaded()
        pairs = list(zip(keys, values))
        for key, value in pairs:
            if type(key) is not bytes or type(value) is not bytes:
                reject_write(key, value)
        self._overlay.put_many(pairs)

    def delete_many(self, keys: Iterable[bytes]) -> None:
        self._require_loaded()
        keys = list(keys)
        for key in keys:
            if type(key) is not bytes:
                reject_write(key, b"")
        self._overlay.put_many((k, None) for k in keys)

    def stage_changes(
        self,
        keys: Sequence[bytes],
        values: Sequence[Optional[bytes]],
        existed: Optional[Sequence[int]] = None,
    ) -> None:
        """Stage a batch of writes (``None`` value = delete), e.g. an epoch's writes shipped
        from the JVM. ``existed`` optionally tells, per key, whether it existed before the
        epoch (1 / 0, or -1 when unknown); known answers spare the exact key count a lookup."""
        self._require_loaded()
        overlay = self._overlay
        if existed is not None:
            overlay.note_committed_many(keys, existed)
        overlay.put_many(zip(keys, values))

    def abort(self) -> None:
        """Drop this epoch's uncommitted writes; the loaded version stays."""
        self._overlay.clear()

    def _require_open(self) -> None:
        if self._closed:
            raise StoreStateError("the store is closed")

    def _require_loaded(self) -> None:
        self._require_open()
        if self._backend is None or self._version is None:
            raise StoreStateError("no version is loaded: call load(version) first")

    def _loaded_backend(self) -> KVBackend:
        self._require_loaded()
        return self._backend  # type: ignore[return-value]


def prefix_upper_bound(prefix: bytes) -> Optional[bytes]:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
