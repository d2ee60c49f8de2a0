"""Take a savepoint: a consistent, self-contained copy of a query at a committed batch.

Consistency, from a stopped or a **running** query, without blocking it:

* The batch ``N`` is read from Spark's commit log first (default: the newest). Spark writes
  ``commits/N`` only after every state store of batch ``N`` committed, so version ``N + 1``
  of every store is committed and final before we look at any state.
* Each store is read at version ``N + 1`` through the engine with a *reader* run context
  (:mod:`.state_io`): the copy the run history says was committed, never an abandoned
  attempt, whatever the running query writes meanwhile. Process state likewise, from the
  layout holding batch version ``N + 1``.
* Spark's files are copied up to batch ``N`` only (offsets, commits, source log entries), so
  the copy restarts exactly after batch ``N``.
* Retention of the running query may delete version ``N + 1`` while we copy (after
  ``retainedVersions`` more batches). A file that vanishes makes the savepoint start again at
  the newest committed batch (up to ``RETRIES`` times); with an explicit ``batch`` it fails
  with :class:`~.errors.RetentionRaceError` naming the file.

The manifest is written last, so an interrupted savepoint has none and is refused by
restore. Nothing ever deletes a savepoint: it lives outside every checkpoint, and the
engine's retention only looks inside store directories.

Checkpoints of Spark's HDFS and RocksDB providers are read by those providers in the JVM
(:mod:`.jvm_bridge`), and their rows are given the spark-state key layout, so their
savepoints are the same canonical format (this is how ``migrate`` imports them).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from ..deprecation import renamed_arguments
from ..errors import CheckpointFileMissingError, VersionNotFoundError
from ..process import location as L
from ..process.errors import StateLocationError
from ..process.clock import time_files
from ..storage import CheckpointStorage, LocalStorage, open_storage
from . import savepoint_format as F
from .checkpoint_reader import OPERATOR_METADATA, SPARKSTATE_PROVIDER, OperatorInfo, SparkCheckpoint
from .errors import ProcessStateNotFoundError, RetentionRaceError, TargetExistsError, TargetInsideSourceError
from .progress import Progress
from .process_locations import find_process_locations, where_looked
from .state_files import write_small_file, write_state_file
from .state_io import process_entries, process_layout, reader_config, store_entries

#: How often a savepoint of a running query starts again at a newer batch when retention
#: deleted a file it was copying.
RETRIES = 3

#: entries(op, store, partition, version) -> the store's rows in spark-state's layout
StoreReader = Callable[[OperatorInfo, str, int, int], Iterator[tuple[bytes, bytes]]]


@dataclass
class SavepointResult:
    savepoint: str
    checkpoint: str
    batch_id: int
    query_id: str
    partitions: int
    operators: list[dict[str, Any]]
    process_states: list[str]
    keys: int
    bytes: int
    files: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@renamed_arguments(savepoint_options="target_storage_options")
def savepoint(checkpoint: str, savepoint_dir: str, batch: Optional[int] = None, *,
              process_root: Optional[str] = None, process_locations: Optional[dict[str, str]] = None,
              storage_options: Optional[dict[str, str]] = None,
              target_storage_options: Optional[dict[str, str]] = None, progress: bool = True,
              store_reader: Optional[StoreReader] = None, allow_no_state: bool = False) -> SavepointResult:
    """Write a savepoint of ``checkpoint`` at committed ``batch`` (default: the latest) into
    ``savepoint_dir``, a new or empty directory outside the checkpoint (see :func:`check_target`).
    See the module docstring.

    Spark's checkpoint does not record ``keyed_process`` / ``checkpointed_process`` operators,
    so their state is looked for beside the checkpoint (``<checkpoint>/spark-state/<name>``, the
    runtime's default), under ``process_root`` (default: the former default root
    ``./spark-state`` if it exists) and at ``process_locations`` (see :mod:`.process_locations`).
    A query whose checkpoint has no stateful operator of Spark's and whose process state is
    found nowhere is refused (:class:`ProcessStateNotFoundError`): its savepoint would hold no
    state, and a query that keeps its state elsewhere could not be restored from it.
    ``allow_no_state=True`` takes it anyway (a query that keeps no state).

    ``storage_options`` (``s3.*``, ``retry.*``, ``hdfs.*``) apply to every location the call reads
    or writes: the checkpoint, the process state and the savepoint directory (a location ignores the
    options of other schemes). ``target_storage_options``, when given, replace them for the
    savepoint directory alone (e.g. another bucket's credentials)."""
    started = time.perf_counter()
    ckpt = SparkCheckpoint(checkpoint, storage_options)
    target = open_storage(savepoint_dir, dict((storage_options if target_storage_options is None
                                               else target_storage_options) or {}))
    check_target(ckpt, target, savepoint_dir)
    last_error: Optional[Exception] = None
    for _attempt in range(RETRIES + 1):
        n = ckpt.committed_batch(batch)
        try:
            manifest = take(ckpt, target, n, process_root, process_locations or {}, storage_options or {},
                             progress, store_reader, allow_no_state)
            break
        except (CheckpointFileMissingError, VersionNotFoundError) as exc:
            if batch is not None:
                raise RetentionRaceError(
                    f"batch {batch} of {ckpt.url} cannot be copied: {exc}. Retention of the running query "
                    "deleted it; take the savepoint at a newer batch (omit --batch for the latest)") from None
            last_error = exc
    else:
        raise RetentionRaceError(f"{ckpt.url}: files vanished while copying {RETRIES + 1} times in a row "
                                 f"(retention of a running query too fast?); last: {last_error}")
    target.write_bytes(F.MANIFEST, manifest.to_json())
    return SavepointResult(
        savepoint=target.url, checkpoint=ckpt.url, batch_id=manifest.batch_id, query_id=manifest.query_id,
        partitions=manifest.partitions,
        operators=[{"id": o.id, "name": o.name, "stores": [s.name for s in o.stores]} for o in manifest.operators],
        process_states=[p.name for p in manifest.process], keys=manifest.total_keys,
        bytes=manifest.total_bytes, files=len(manifest.files) + 1, seconds=round(time.perf_counter() - started, 3))


def check_target(ckpt: SparkCheckpoint, target: CheckpointStorage, savepoint_dir: str) -> None:
    """Refuse a savepoint directory that is the checkpoint, is inside it or holds it
    (:class:`TargetInsideSourceError`), or that holds a savepoint or anything else
    (:class:`TargetExistsError`): a savepoint lives outside every checkpoint, in a directory of
    its own, so that nothing but the savepoint writes or deletes its files."""
    where = _relation(target, ckpt.storage)
    if where:
        raise TargetInsideSourceError(
            f"the savepoint directory {target.url} {where} the checkpoint {ckpt.url}: a savepoint must live "
            "outside every checkpoint (the query and its retention write and delete files there); choose a new "
            "directory outside it")
    check_empty_target(target, savepoint_dir)


def check_empty_target(target: CheckpointStorage, savepoint_dir: str) -> None:
    """Refuse a savepoint directory that holds a savepoint or anything else
    (:class:`TargetExistsError`)."""
    if target.exists(F.MANIFEST):
        raise TargetExistsError(f"{target.full_url(F.MANIFEST)} exists: {savepoint_dir} already holds a savepoint; "
                                "choose a new directory (savepoints are never overwritten)")
    content = _content(target)
    if content:
        raise TargetExistsError(
            f"the savepoint directory {target.url} is not empty (it holds {', '.join(content[:3])}"
            + (", ..." if len(content) > 3 else "") + "): a savepoint is written into a new or empty directory, "
            "so that its files cannot mix with others; choose a new directory")


def _relation(target: CheckpointStorage, source: CheckpointStorage) -> str:
    """How ``target`` lies to ``source``: "is", "is inside", "holds", or "" (apart)."""
    a, b = _location_key(target), _location_key(source)
    if a == b:
        return "is"
    if a.startswith(b.rstrip("/") + "/"):
        return "is inside"
    if b.startswith(a.rstrip("/") + "/"):
        return "holds"
    return ""


def _location_key(storage: CheckpointStorage) -> str:
    """A storage root comparable with another: a local directory's real path (symbolic links
    resolved), else the URL with ``s3a://`` spelled ``s3://``."""
    if isinstance(storage, LocalStorage):
        return os.path.realpath(storage.root)
    url = storage.url.rstrip("/")
    return "s3://" + url[len("s3a://"):] if url.startswith("s3a://") else url


def _content(storage: CheckpointStorage) -> list[str]:
    """Names of what a directory holds: every entry on local disk; elsewhere (object stores have
    no directories to list) the files at its top level and in the savepoint's own directories."""
    if isinstance(storage, LocalStorage):
        if not os.path.isdir(storage.root):
            return []
        return sorted(os.listdir(storage.root))
    names = storage.list_dir("") + storage.list_dir("", temp_files=True)
    for sub in (F.SPARK_DIR, F.STATE_DIR, F.PROCESS_DIR):
        names += [f"{sub}/{name}" for name in storage.list_dir(sub)]
    return names


def take(ckpt: SparkCheckpoint, target: CheckpointStorage, n: int, process_root: Optional[str],
         process_locations: dict[str, str], storage_options: dict[str, str], progress: bool,
         store_reader: Optional[StoreReader], allow_no_state: bool = False,
         spark_logs: bool = True) -> F.SavepointManifest:
    """Write the savepoint's files of batch ``n`` into ``target``; returns its manifest, which
    the caller writes. ``spark_logs=False`` copies Spark's operator metadata and schema files but
    not its logs (``metadata``, offsets, commits, sources): a bootstrap writes its own
    (:mod:`spark_state.state_data.writers.bootstrap`)."""
    provider = ckpt.provider_class(n)
    manifest = F.SavepointManifest(source=ckpt.url, query_id=ckpt.query_id(), batch_id=n, provider_class=provider,
                                   partitions=ckpt.partitions(n))
    operators = ckpt.operators()
    processes = find_process_locations(ckpt.storage, manifest.query_id, process_root, process_locations,
                                       storage_options)
    if not operators and not processes and not allow_no_state:
        raise _no_state(ckpt, n, manifest.query_id, process_root)
    # The partition count of batch n is its offset log entry's: operator metadata holds the
    # current count, which differs for batches before an in-place rescale.
    partitions = manifest.partitions
    version = n + 1
    config = reader_config()
    if store_reader is None:
        if provider != SPARKSTATE_PROVIDER and operators:
            from .jvm_bridge import spark_provider_reader

            store_reader = spark_provider_reader(ckpt, n)
        else:
            def store_reader(op: OperatorInfo, store: str, p: int, v: int) -> Iterator[tuple[bytes, bytes]]:
                return store_entries(ckpt.store_storage(op, p, store), v, config)

    bar = Progress(f"savepoint of batch {n}", unit="rows", enabled=progress)
    try:
        for op in operators:
            entry = F.OperatorEntry(op.id, op.name, partitions)
            for info in op.stores:
                key_schema, value_schema = ckpt.store_schema(op, info.name)
                entry.stores.append(F.StoreEntry(info.name, info.num_cols_prefix_key, key_schema, value_schema))
                for p in range(partitions):
                    _write_state(target, F.state_file(op.id, info.name, p), store_reader(op, info.name, p, version),
                                 manifest, bar)
            manifest.operators.append(entry)
        for loc in processes:
            storage = loc.storage()
            layout = process_layout(storage, version)
            for i in range(layout.parallelism):
                _write_state(target, F.process_file(loc.name, i), process_entries(storage, layout, i, version, config),
                             manifest, bar)
            # The batch clock (event-time maxima, watermark) lives beside the stores: carry the
            # files the next batch's time is computed from, so a restore never moves it back.
            for rel in time_files(storage, n):
                _copy(storage, target, rel, manifest, dest=F.process_time_file(loc.name, rel))
            manifest.process.append(F.ProcessEntry(loc.name, loc.kind, loc.max_parallelism, layout.parallelism,
                                                   loc.url, loc.under_root, loc.placement, _key_record(storage)))
        for path in _spark_files(ckpt, operators, n, spark_logs):
            _copy(ckpt.storage, target, path, manifest)
        for op in operators:  # operator metadata: Spark's file, or what was inferred without one (3.5)
            path = f"state/{op.id}/{OPERATOR_METADATA}"
            if ckpt.storage.exists(path):
                _copy(ckpt.storage, target, path, manifest)
            else:
                write_file(target, f"{F.SPARK_DIR}/{path}", op.encode_metadata(), manifest)
    finally:
        bar.close()
    return manifest


def _key_record(storage: CheckpointStorage) -> Optional[dict]:
    """The key columns ``_operator.json`` records (None: operator state, or not recorded yet)."""
    try:
        key = L.read_meta(storage).get("key")
    except StateLocationError:
        return None
    return dict(key) if isinstance(key, dict) else None


def _no_state(ckpt: SparkCheckpoint, n: int, query_id: str, process_root: Optional[str]) -> ProcessStateNotFoundError:
    return ProcessStateNotFoundError(
        f"the savepoint of batch {n} of {ckpt.url} would hold no state: the checkpoint has no stateful operator "
        f"of Spark's, and no keyed_process/checkpointed_process state of query {query_id} was found "
        f"{where_looked(ckpt.storage, query_id, process_root)}. Spark's checkpoint does not record those operators "
        "or where their state lives: if the query runs one with state_root= (or the conf "
        f"{L.ROOT_CONF}), point at its state with --process-root DIR (the state is at DIR/{query_id}/<name>); with "
        "state_location=, with --process-location NAME=URL; a savepoint without it could not be restored. For a "
        "query that keeps no state, pass --allow-no-state. (Python: process_root=, process_locations={name: url}, "
        "allow_no_state=True)")


def _write_state(target: CheckpointStorage, path: str, entries: Iterator[tuple[bytes, bytes]],
                 manifest: F.SavepointManifest, bar: Progress) -> None:
    """Write a state file in bounded memory (:func:`.state_files.write_state_file`, the one
    writer of state files) and list it in ``manifest``."""
    manifest.files.append(write_state_file(target, path, entries, on_batch=bar.update))


def _copy(source: CheckpointStorage, target: CheckpointStorage, path: str, manifest: F.SavepointManifest,
          dest: Optional[str] = None) -> None:
    write_file(target, dest or f"{F.SPARK_DIR}/{path}", source.read_bytes(path), manifest)


def write_file(target: CheckpointStorage, dest: str, data: bytes, manifest: F.SavepointManifest) -> None:
    """Write ``data`` at ``dest`` in the savepoint and list it in ``manifest`` (size, CRC-32):
    for Spark's small files and clock files; state files are written by :func:`_write_state`."""
    manifest.files.append(write_small_file(target, dest, data))


def _spark_files(ckpt: SparkCheckpoint, operators: list[OperatorInfo], n: int, logs: bool = True) -> list[str]:
    """Spark's files a restart after batch ``n`` needs (see the format's module docstring);
    without ``logs``, only the operators' schema files."""
    paths = []
    if logs:
        paths.append("metadata")
        paths += [f"offsets/{b}" for b in ckpt.batch_ids("offsets") if b <= n]
        paths += [f"commits/{b}" for b in ckpt.batch_ids("commits") if b <= n]
        for i in range(ckpt.source_count()):
            paths += [f"sources/{i}/{name}" for name, b in ckpt.source_files(i) if b is None or b <= n]
    for op in operators:
        paths += [op.schema_path(s) for s in op.store_names]
    return paths
