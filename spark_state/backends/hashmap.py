"""In-memory backend: a Python dict, plus a lazily maintained sorted key index.

Fastest for state that fits in memory. Snapshots are full: one Arrow IPC file of all
entries (``data.arrow``; schema ``key: binary, value: binary``, sorted by key). That is
the trade Flink's heap backend makes too: incrementality comes from the changelog, and
a snapshot costs time proportional to the state.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import os
import sys
from typing import Iterable, Iterator, Optional, Sequence

import pyarrow as pa

from .. import constants as C
from ..arrow_chunks import batch_entries, chunks
from ..errors import CheckpointCorruptError
from ..storage.localdisk import disk_errno
from .base import BackendFactory, Change, KVBackend, SnapshotFile

SNAPSHOT_FILE = "data.arrow"
#: Entries whose sizes :meth:`HashMapBackend.memory_bytes` adds up; more are estimated from them.
_SIZE_SAMPLE = 4096
_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])


class HashMapBackend(KVBackend):
    name = C.BACKEND_HASHMAP

    def __init__(self, data: Optional[dict[bytes, bytes]] = None) -> None:
        self._data: dict[bytes, bytes] = data if data is not None else {}
        # Sorted key list for ordered scans, built on the first scan and then kept up to
        # date incrementally; most workloads never scan, and then pay nothing for it.
        self._sorted: Optional[list[bytes]] = None

    def get(self, key: bytes) -> Optional[bytes]:
        return self._data.get(key)

    def multi_get(self, keys: Sequence[bytes]) -> list[Optional[bytes]]:
        get = self._data.get
        return [get(k) for k in keys]

    def contains(self, key: bytes) -> bool:
        return key in self._data

    def count_existing(self, keys: Sequence[bytes]) -> int:
        return sum(map(self._data.__contains__, keys))  # a C loop: runs over a commit's unread keys

    def iterate(
        self, start: Optional[bytes] = None, end: Optional[bytes] = None
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = self._sorted_keys()
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        data = self._data
        # Materialise the slice so that the iterator is a stable view of the state now.
        for key in keys[lo:hi]:
            yield key, data[key]

    def apply(self, changes: Iterable[Change]) -> None:
        data = self._data
        added: list[bytes] = []
        removed: set[bytes] = set()
        track = self._sorted is not None
        for key, value in changes:
            if value is None:
                if data.pop(key, None) is not None and track:
                    removed.add(key)
            else:
                if track and key not in data:
                    added.append(key)
                data[key] = value
        if track and (added or removed):
            self._update_index(added, removed)

    def apply_distinct(self, put_keys: list[bytes], put_values: list[bytes], delete_keys: list[bytes]) -> None:
        """:meth:`apply` of distinct keys, driven by C loops (``dict.update``, ``map``): a commit's
        keys cost no bytecode each. The sorted index, once built, is kept up to date as by :meth:`apply`."""
        data = self._data
        track = self._sorted is not None
        if track:
            added = list(itertools.filterfalse(data.__contains__, put_keys))
            removed = set(filter(data.__contains__, delete_keys))
        data.update(zip(put_keys, put_values))
        collections.deque(map(data.pop, delete_keys, itertools.repeat(None)), 0)
        if track and (added or removed):
            self._update_index(added, removed)

    def memory_bytes(self) -> int:
        """The dict's own table plus its keys' and values' object sizes: exact up to
        :data:`_SIZE_SAMPLE` entries, beyond that their mean over the first ones times their number
        (every task reports it after its commit: a pass over a large state each time cost as much
        as the batch)."""
        data = self._data
        n = len(data)
        sample = itertools.islice(data.items(), _SIZE_SAMPLE)
        sampled = sum(sys.getsizeof(key) + sys.getsizeof(value) for key, value in sample)
        return sys.getsizeof(data) + (sampled if n <= _SIZE_SAMPLE else int(sampled / _SIZE_SAMPLE * n))

    def write_snapshot(self, directory: str) -> list[SnapshotFile]:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, SNAPSHOT_FILE)
        keys = self._sorted_keys()
        data = self._data
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as writer:
            for chunk in chunks(keys, C.ARROW_BATCH_ROWS):
                writer.write_batch(pa.record_batch(
                    [pa.array(chunk, pa.binary()), pa.array([data[k] for k in chunk], pa.binary())], schema=_SCHEMA))
        return [SnapshotFile(SNAPSHOT_FILE, path, os.path.getsize(path), shared=False)]

    def close(self) -> None:
        self._data = {}
        self._sorted = None

    def _sorted_keys(self) -> list[bytes]:
        if self._sorted is None:
            self._sorted = sorted(self._data)
        return self._sorted

    def _update_index(self, added: list[bytes], removed: set[bytes]) -> None:
        keys = self._sorted
        assert keys is not None
        if removed:
            keys = [k for k in keys if k not in removed]
        if added:
            if len(added) < 64:
                for key in added:
                    bisect.insort(keys, key)
            else:
                # Timsort merges the two sorted runs in linear time.
                added.sort()
                keys.extend(added)
                keys.sort()
        self._sorted = keys


class HashMapBackendFactory(BackendFactory):
    name = C.BACKEND_HASHMAP

    def create_empty(self, directory: str) -> KVBackend:
        return HashMapBackend()

    def open_snapshot(self, directory: str) -> KVBackend:
        path = os.path.join(directory, SNAPSHOT_FILE)
        data: dict[bytes, bytes] = {}
        try:
            # One record batch at a time: beside the map being built, memory holds one batch's
            # keys and values as Python lists (the file is memory-mapped, not read).
            with pa.memory_map(path) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    batch = reader.get_batch(i)
                    data.update(batch_entries(batch.column("key"), batch.column("value")))
        except FileNotFoundError:
            raise CheckpointCorruptError(path, "hashmap snapshot has no data file") from None
        except (pa.ArrowInvalid, OSError) as exc:
            if disk_errno(exc) is not None:
                raise  # a broken local disk, not a damaged snapshot (the store reports it)
            raise CheckpointCorruptError(path, f"unreadable Arrow data ({exc})") from None
        return HashMapBackend(data)
