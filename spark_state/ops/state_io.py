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
location* (see :mod:`spark_state.process.location`), by default ``<root>/<query id>/<name>``.
:func:`find_process_locations` finds the locations of a query under a root on local disk;
remote roots need the locations named explicitly.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Optional

from ..checkpoint.retention import list_copies
from ..checkpoint.runs import RunContext, RunRegistry
from ..config import EngineConfig
from ..storage import CheckpointStorage, open_storage
from ..engine.store import VersionedStore
from ..process import location as L
from .errors import NoCommittedBatchError, ProcessStateNotFoundError, UnsupportedCheckpointError


def reader_config(backend: str = "rocksdb", local_dir: Optional[str] = None) -> EngineConfig:
    return EngineConfig(backend=backend, snapshot_interval=0, local_dir=local_dir)


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
    return f"spark-state-ops-{what}-{uuid.uuid4()}"


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
@dataclass(frozen=True)
class ProcessLocation:
    """A keyed_process / checkpointed_process state location of the query."""

    name: str
    url: str
    kind: str
    max_parallelism: Optional[int]
    #: the root it was found under (``<root>/<query id>/<name>``), None if given explicitly
    under_root: Optional[str]
    storage_options: Mapping[str, str]

    def storage(self) -> CheckpointStorage:
        return open_storage(self.url, dict(self.storage_options))


def default_process_root() -> str:
    """Where keyed_process keeps state by default: ``./spark-state`` of the working directory."""
    return os.path.abspath(L.DEFAULT_ROOT_DIR)


def find_process_locations(query_id: str, root: Optional[str], explicit: Mapping[str, str],
                           storage_options: Mapping[str, str]) -> list[ProcessLocation]:
    """The query's process state locations: those named in ``explicit`` (name -> URL) and every
    ``<root>/<query id>/<name>`` holding an ``_operator.json`` (``root`` on local disk; None:
    the runtime's default root, ``./spark-state``, if it exists; ``""``: no root).

    Raises:
        ProcessStateNotFoundError: ``root`` was given and holds no state of the query (a wrong
            root, or a remote one, which cannot be listed).
    """
    found: dict[str, ProcessLocation] = {}
    given = root
    if root is None and os.path.isdir(default_process_root()):
        root = default_process_root()
    for name, url in explicit.items():
        found[name] = _location(name, url, None, storage_options, required=True)
    if root:
        under_root = _locations_under(root, query_id, storage_options)
        if given and not under_root:
            raise _nothing_under(given, query_id)
        for name, location in under_root.items():
            found.setdefault(name, location)
    return [found[n] for n in sorted(found)]


def _locations_under(root: str, query_id: str, storage_options: Mapping[str, str]) -> dict[str, ProcessLocation]:
    """Every ``<root>/<query id>/<name>`` holding an ``_operator.json`` (``root`` on local disk)."""
    base = os.path.join(_local_path(root), query_id)
    if not os.path.isdir(base):
        return {}
    return {name: _location(name, os.path.join(base, name), root, storage_options, required=True)
            for name in sorted(os.listdir(base)) if os.path.isfile(os.path.join(base, name, L.META_FILE))}


def _nothing_under(root: str, query_id: str) -> ProcessStateNotFoundError:
    where = os.path.join(_local_path(root), query_id)
    remote = "://" in root and not root.startswith("file://")
    return ProcessStateNotFoundError(
        f"the process root {root} holds no keyed_process/checkpointed_process state of query {query_id}: "
        + ("process roots are listed on local disk only; name each remote state location with "
           "--process-location NAME=URL (Python: process_locations={name: url})" if remote else
           f"no {where}/<name>/{L.META_FILE}. Pass the root the query's state_root= or the conf {L.ROOT_CONF} "
           "named (its state is at <root>/<query id>/<name>), or name each state location with "
           "--process-location NAME=URL (Python: process_locations={name: url})"))


def _local_path(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def _location(name: str, url: str, root: Optional[str], options: Mapping[str, str], required: bool) -> ProcessLocation:
    storage = open_storage(url, dict(options))
    try:
        meta = json.loads(storage.read_bytes(L.META_FILE))
    except Exception as exc:
        raise UnsupportedCheckpointError(
            f"{storage.full_url(L.META_FILE)} cannot be read ({exc}): is {url} the state location of "
            f"the process operator {name!r}?") from None
    return ProcessLocation(name, url, str(meta.get("kind")), meta.get("max_parallelism"), root, dict(options))


def process_layout(storage: CheckpointStorage, batch_version: int) -> L.Layout:
    """The layout whose stores hold the committed copy of ``batch_version`` in every partition."""
    runs = RunContext(RunRegistry(storage), None)
    runs.refresh()
    best: Optional[tuple[tuple[int, int], L.Layout]] = None
    for lay in L.list_layouts(storage):
        if lay.base >= batch_version:
            continue
        ranks = [L.valid_rank(storage, lay, i, batch_version, runs) for i in range(lay.parallelism)]
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
                         config: EngineConfig, run_id: str) -> None:
    """Write layout ``(parallelism, batch_version - 1)`` whose store version 1 is ``batch_version``
    (a layout holds batch versions ``base + 1`` on), one partition at a time, then register it."""
    L.verify_location(storage, kind, max_parallelism)
    layout = L.Layout(parallelism, batch_version - 1)
    for i, entries in partitions:
        import_store(storage.child(layout.store_path(i)), 1, entries, config, run_id, layout.base, registry=storage)
    L.register_layout(storage, layout)
