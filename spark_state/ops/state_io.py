"""Reading committed state and writing new store versions, through the engine's own code.

Reads use a *reader* :class:`~spark_state.checkpoint.runs.RunContext` (no run id): it never
registers, fences or writes, and it loads the copy of a version that the run history says
was committed -- never an abandoned attempt. Callers pass versions of batches found in
Spark's commit log, so a read of a running query's checkpoint is consistent: every store
committed its version of batch ``b`` before Spark wrote ``commits/b``.

Writes (restore, rescale, migrate) go through :meth:`VersionedStore.import_version` under a
*tool run*: a registered run (rank after every earlier run) whose start version is the
version before the one it writes, so that copies of later versions left by earlier runs
(abandoned attempts of an uncommitted batch) are never read again, and the next real run of
the query, which registers after it, takes the tool's copy as the committed one.

Process state (``keyed_process`` / ``checkpointed_process``) lives in its own *state
location* (see :mod:`spark_state.process.location`); :mod:`.process_locations` finds a
query's locations, this module reads and writes the layouts in one.
"""

from __future__ import annotations

import uuid
from typing import Callable, Iterable, Iterator, Optional

from .. import constants as C
from ..checkpoint.retention import list_copies
from ..checkpoint.runs import RunContext, RunRegistry
from ..config import EngineConfig
from ..storage import CheckpointStorage
from ..engine.store import VersionedStore
from ..process import location as L
from .errors import NoCommittedBatchError


def reader_config(backend: str = "rocksdb", local_dir: Optional[str] = None) -> EngineConfig:
    """The engine of a store a tool opens to read committed state (or loads a savepoint's
    entries into): no snapshots of its own, and the tools' RocksDB budget
    (:data:`~spark_state.constants.TOOL_BLOCK_CACHE_MB`)."""
    return EngineConfig(backend=backend, snapshot_interval=0, local_dir=local_dir,
                        block_cache_mb=C.TOOL_BLOCK_CACHE_MB, write_buffer_mb=C.TOOL_WRITE_BUFFER_MB)


def open_committed(storage: CheckpointStorage, version: int, config: EngineConfig,
                   version_offset: int = 0, registry: Optional[CheckpointStorage] = None) -> VersionedStore:
    """A store loaded at the committed copy of store ``version`` (0: empty), for reading.
    ``registry``: where the run registry lives (default: the store itself, as for the
    provider; a process state location keeps one registry for all its stores)."""
    runs = RunContext(RunRegistry(registry or storage), None, version_offset)
    store = VersionedStore(storage, config, runs=runs)
    try:
        store.load(version)
    except BaseException:
        store.close()
        raise
    return store


def store_entries(storage: CheckpointStorage, version: int, config: EngineConfig) -> Iterator[tuple[bytes, bytes]]:
    """Every entry of the committed copy of provider store ``version``. A store that never
    committed anything (no manifest at all; e.g. partitions 1.. of a single-partition
    operator such as streaming ``limit``) is empty; retention never removes a store's last
    versions, so "no manifest" cannot mean "deleted"."""
    if not list_copies(storage):
        return
    store = open_committed(storage, version, config)
    try:
        yield from store.iterate()
    finally:
        store.close()


def new_tool_run_id(what: str) -> str:
    return f"{C.TOOL_RUN_PREFIX}{what}-{uuid.uuid4()}"


def import_store(storage: CheckpointStorage, version: int, entries: Iterable[tuple[bytes, bytes]],
                 config: EngineConfig, run_id: str, version_offset: int = 0,
                 registry: Optional[CheckpointStorage] = None) -> int:
    """Write store ``version`` from ``entries`` as the tool run ``run_id``; returns its key count.
    ``registry`` as for :func:`open_committed`."""
    runs = RunContext(RunRegistry(registry or storage), run_id, version_offset)
    with VersionedStore(storage, config, runs=runs) as store:
        manifest = store.import_version(version, entries)
        return manifest.num_keys


# ------------------------------------------------------------------------------ process state
def process_layout(storage: CheckpointStorage, batch_version: int,
                   partitions: Optional[Callable[[L.Layout], Iterable[int]]] = None) -> L.Layout:
    """The layout whose stores hold the committed copy of ``batch_version`` in every partition
    (``partitions``: in only the partitions it names for a layout, so that a reader of one key
    touches no other partition's store)."""
    runs = RunContext(RunRegistry(storage), None)
    runs.refresh()
    best: Optional[tuple[tuple[int, int], L.Layout]] = None
    for lay in L.list_layouts(storage):
        if lay.base >= batch_version:
            continue
        wanted = range(lay.parallelism) if partitions is None else partitions(lay)
        ranks = [L.valid_rank(storage, lay, i, batch_version, runs) for i in wanted]
        if any(r is None for r in ranks):
            continue
        order = (min(r for r in ranks if r is not None), lay.base)
        if best is None or order > best[0]:
            best = (order, lay)
    if best is None:
        raise NoCommittedBatchError(
            f"the process state at {storage.url} holds no committed copy of batch version {batch_version} "
            f"(found: {L.describe_layouts(storage)}); was the state location changed or cleaned?")
    return best[1]


def process_entries(storage: CheckpointStorage, layout: L.Layout, partition: int, batch_version: int,
                    config: EngineConfig) -> Iterator[tuple[bytes, bytes]]:
    store = open_committed(storage.child(layout.store_path(partition)), layout.store_version(batch_version),
                           config, layout.base, registry=storage)
    try:
        yield from store.iterate()
    finally:
        store.close()


def write_process_layout(storage: CheckpointStorage, kind: str, max_parallelism: Optional[int], parallelism: int,
                         batch_version: int, partitions: Iterable[tuple[int, Iterable[tuple[bytes, bytes]]]],
                         config: EngineConfig, run_id: str, key: Optional[dict] = None) -> None:
    """Write layout ``(parallelism, batch_version - 1)`` whose store version 1 is ``batch_version``
    (a layout holds batch versions ``base + 1`` on), one partition at a time, then register it.
    ``key``: the key columns to record (a keyed function's, from a savepoint)."""
    L.verify_location(storage, kind, max_parallelism, key)
    layout = L.Layout(parallelism, batch_version - 1)
    for i, entries in partitions:
        import_store(storage.child(layout.store_path(i)), 1, entries, config, run_id, layout.base, registry=storage)
    L.register_layout(storage, layout)
