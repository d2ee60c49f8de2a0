"""Partition stores for one task: find the version a batch needs, keep stores open across
batches, and build a new layout's store when the parallelism changed.

Invariants
----------
* Batch ``B`` of partition ``i`` works on a :class:`~spark_state.engine.store.VersionedStore`
  loaded at batch version ``B`` (the state after batch ``B - 1``) and commits ``B + 1``;
  store versions are offset by the layout's base (see :mod:`.location`).
* Every store works for the query run of its task (:mod:`spark_state.checkpoint.runs`): its
  commits are ranked by the run, the first attempt of a run to commit a version wins, and a
  version is read from the copy that the run history says was committed -- never from an
  attempt whose batch a later run re-ran.
* A Python worker keeps the stores it committed in a process-wide LRU cache, keyed by
  (location, layout, partition), so the next batch of that partition in the same process
  needs no restore. A cached store is used only if it belongs to the task's run, its version
  is the one needed *and* its copy of that version is still the valid one. Otherwise the
  store is loaded, which replays or restores from checkpoint storage.
* A store is taken out of the cache while a task uses it and put back only after a
  successful commit; a failed task closes its store, so a retry starts from checkpoint
  storage. Each VersionedStore has its own local working directory, so two processes
  never share a RocksDB directory.
* A rescale is deterministic (it reads committed versions only), so a retried rescale
  batch rebuilds the same store and re-commits the same version.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

import pyarrow as pa

from .. import constants as C
from ..backends.rocksdb_resources import current_resources
from ..checkpoint.runs import RunContext
from ..config import EngineConfig
from ..storage import CheckpointStorage
from ..engine.metrics import RestoreMetrics, describe_restore
from ..engine.store import VersionedStore
from .arrow_io import OutputWriter
from .errors import StateVersionMissingError
from .location import Choice, Layout, choose_layout, describe_layouts, register_layout, valid_rank

_LOG = logging.getLogger(__name__)

#: Stores one Python worker keeps open between batches (least recently used are closed).
MAX_CACHED_STORES = 64

#: populate(new_store, old_layout, old_stores): stage the new partition's share of the old state.
Populate = Callable[[VersionedStore, Layout, dict[int, VersionedStore]], None]


@dataclass
class _Cached:
    store: VersionedStore
    layout: Layout
    #: run rank of the copy the store holds
    rank: int


class _StoreCache:
    def __init__(self) -> None:
        self._entries: "OrderedDict[tuple[str, int, int], _Cached]" = OrderedDict()
        self._lock = threading.Lock()

    def take(self, url: str, parallelism: int, partition: int) -> Optional[_Cached]:
        with self._lock:
            return self._entries.pop((url, parallelism, partition), None)

    def put(self, url: str, partition: int, entry: _Cached) -> None:
        evicted = []
        with self._lock:
            key = (url, entry.layout.parallelism, partition)
            old = self._entries.pop(key, None)
            if old is not None and old.store is not entry.store:
                evicted.append(old)
            self._entries[key] = entry
            while len(self._entries) > MAX_CACHED_STORES:
                evicted.append(self._entries.popitem(last=False)[1])
        for e in evicted:
            e.store.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for e in entries:
            e.store.close()


CACHE = _StoreCache()


@dataclass
class PartitionStore:
    """The store a task works on, loaded at the batch's version; call :meth:`commit` or
    :meth:`discard` exactly once."""

    url: str
    partition: int
    layout: Layout
    store: VersionedStore
    #: "new" (batch 0), "cached", "loaded" (replayed or restored) or "rescaled"
    origin: str
    batch_version: int
    _storage: CheckpointStorage
    #: keep the committed store in the worker's cache for the next batch (a streaming task); an
    #: offline run (:mod:`.offline`) keeps it itself, and closes it
    cached: bool = True
    #: what the loads of the task's stores did (the store's, or a rescale's old stores'), and how
    #: long :func:`acquire` took
    loads: tuple[RestoreMetrics, ...] = ()
    load_ms: float = 0.0

    def commit(self) -> int:
        """Commit batch version ``batch_version + 1``; keep the store for the next batch (``cached``)."""
        s = self.store.commit()
        manifest = self.store.manifest
        assert manifest is not None
        if self.cached:
            CACHE.put(self.url, self.partition, _Cached(self.store, self.layout, manifest.rank))
        return self.layout.base + s

    def discard(self) -> None:
        """Drop the pending writes and close the store (a failed task)."""
        try:
            self.store.abort()
        finally:
            self.store.close()


def task_output(ps: PartitionStore, out: OutputWriter, body: Iterator[pa.RecordBatch],
                observation: Callable[[], pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's output: the batches ``body`` yields (it ends with ``ps``'s commit), then what
    ``out`` still holds, then the task's observation row (:mod:`.observation`), built after
    the commit. Any exception in ``body`` discards ``ps``'s pending writes and closes it before
    it propagates, so a retry of the task starts from the committed version."""
    try:
        yield from body
    except BaseException:
        ps.discard()
        raise
    last = out.flush()
    if last is not None:
        yield last
    yield observation()


def store_observation(ps: PartitionStore, batch_id: int) -> dict[str, Any]:
    """The figures of a task's store after its commit (:mod:`.observation`)."""
    store = ps.store
    commit = store.last_commit
    return {
        "batch": batch_id,
        "load_ms": ps.load_ms,
        "load_files_fetched": sum(m.snapshot_files_downloaded for m in ps.loads),
        "load_bytes_fetched": sum(m.snapshot_bytes_downloaded for m in ps.loads),
        "changelog_bytes_replayed": sum(m.changelog_bytes_replayed for m in ps.loads),
        "rows_total": store.num_keys(),
        "rows_updated": commit.num_updates + commit.num_deletes,
        "state_bytes": state_memory_bytes(store),
        "checkpoint_bytes_written": commit.changelog_bytes + commit.snapshot_bytes_uploaded,
        "commit_ms": commit.duration_ms,
    }


def state_memory_bytes(store: VersionedStore) -> int:
    """The memory a task's state holds, counted as the provider counts ``memoryUsedBytes``: on
    ``rocksdb`` the store's share of this process's RocksDB memory (the shared block cache's usage,
    memtables and index and filter blocks included, split evenly between the process's open
    stores, so that the shares add up to what RocksDB holds), on ``hashmap`` its state's estimate;
    plus the most its last epoch's pending writes held. Called after the commit, when the store is
    among the cached ones."""
    resources = current_resources()
    if store.config.backend == C.BACKEND_ROCKSDB and resources is not None:
        held = resources.usage_bytes() // max(1, len(CACHE))
    else:
        held = store.memory_bytes()
    return held + store.pending_peak_bytes()


def acquire(
    storage: CheckpointStorage,
    config: EngineConfig,
    parallelism: int,
    partition: int,
    batch_version: int,
    sources_needed: Callable[[Layout], Iterable[int]],
    populate: Populate,
    runs: RunContext,
) -> PartitionStore:
    """Open partition ``partition``'s store at ``batch_version`` (see the module docstring), with
    what its loads did; one that took longer than ``config.load_warn_after_ms`` logs it.

    ``runs`` is the task's run at this location (global versions = batch versions).

    :raises StateVersionMissingError: no layout holds ``batch_version``.
    :raises ConcurrentWriterError: this run was fenced off by an earlier one still running.
    """
    started = time.perf_counter()
    ps = _acquire(storage, config, parallelism, partition, batch_version, sources_needed, populate, runs)
    ps.load_ms = (time.perf_counter() - started) * 1000
    if ps.origin not in ("cached", "new"):
        ps.loads = ps.loads or (ps.store.last_restore,)
    if config.load_warn_after_ms and ps.load_ms > config.load_warn_after_ms:
        _LOG.warning("spark-state: loading batch version %d of partition %d under %s took %.0f ms (%s): %s",
                     batch_version, partition, storage.url, ps.load_ms, ps.origin,
                     "; ".join(describe_restore(m) for m in ps.loads) or "no restore")
    return ps


def _acquire(storage: CheckpointStorage, config: EngineConfig, parallelism: int, partition: int,
             batch_version: int, sources_needed: Callable[[Layout], Iterable[int]], populate: Populate,
             runs: RunContext) -> PartitionStore:
    url = storage.url
    runs.before_load(batch_version)
    cached = CACHE.take(url, parallelism, partition)
    if cached is not None and (cached.store.runs is None or cached.store.runs.run_id != runs.run_id):
        cached.store.close()  # a store of another run (the query restarted in this process)
        cached = None
    if cached is not None and batch_version > 0:
        s = cached.layout.store_version(batch_version)
        if 0 < s == _version_of(cached.store):
            if valid_rank(storage, cached.layout, partition, batch_version, runs) == cached.rank:
                cached.store.abort()
                return PartitionStore(url, partition, cached.layout, cached.store, "cached", batch_version, storage)
            # The valid copy is not the one held (another run's): drop the local copy and load.
            cached.store.close()
            cached = None
    if batch_version == 0:
        layout = Layout(parallelism, 0)
        register_layout(storage, layout)
        store = _store_for(cached, storage, config, layout, partition, runs)
        store.load(0)
        return PartitionStore(url, partition, layout, store, "new", 0, storage)
    choice = choose_layout(storage, parallelism, partition, batch_version, sources_needed, runs)
    if choice is None:
        if cached is not None:
            cached.store.close()
        raise StateVersionMissingError(
            f"no state for batch {batch_version} (version {batch_version}) of partition {partition} "
            f"(parallelism {parallelism}) under {url}; found: {describe_layouts(storage)}. The query's "
            "checkpoint says earlier batches ran, so their state should be here: was the state "
            "location changed or cleaned, or retention (retainedVersions) too small?"
            + (f" {url} is a local path: executors on different hosts do not share it, so state written on one "
               "host is missing on another; put the checkpoint (or state_location=) on storage every host shares "
               "(HDFS, S3, a shared mount)" if _is_local(url) else ""))
    if choice.mode == "direct":
        store = _store_for(cached, storage, config, choice.layout, partition, runs)
        try:
            store.load(choice.layout.store_version(batch_version))
        except BaseException:
            store.close()
            raise
        return PartitionStore(url, partition, choice.layout, store, "loaded", batch_version, storage)
    return _rescale(storage, config, parallelism, partition, batch_version, choice, populate, cached, runs)


def _rescale(storage: CheckpointStorage, config: EngineConfig, parallelism: int, partition: int,
             batch_version: int, choice: Choice, populate: Populate, cached: Optional[_Cached],
             runs: RunContext) -> PartitionStore:
    layout = Layout(parallelism, batch_version)
    store = _store_for(cached, storage, config, layout, partition, runs)
    old_stores: dict[int, VersionedStore] = {}
    try:
        store.load(0)
        old_s = choice.layout.store_version(batch_version)
        for j in choice.sources:
            old = VersionedStore(storage.child(choice.layout.store_path(j)), config,
                                 runs=runs.at_offset(choice.layout.base))
            old_stores[j] = old
            old.load(old_s)
        loads = tuple(old.last_restore for old in old_stores.values())
        populate(store, choice.layout, old_stores)
    except BaseException:
        store.close()
        raise
    finally:
        for old in old_stores.values():
            old.close()
    register_layout(storage, layout)
    return PartitionStore(storage.url, partition, layout, store, "rescaled", batch_version, storage, loads=loads)


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file:")


def _store_for(cached: Optional[_Cached], storage: CheckpointStorage, config: EngineConfig,
               layout: Layout, partition: int, runs: RunContext) -> VersionedStore:
    if cached is not None:
        if cached.layout == layout:
            return cached.store
        cached.store.close()
    return VersionedStore(storage.child(layout.store_path(partition)), config, runs=runs.at_offset(layout.base))


def _version_of(store: VersionedStore) -> Optional[int]:
    try:
        return store.version
    except Exception:
        return None
