"""Restore a savepoint into a new checkpoint, optionally at another partition count.

The new checkpoint restarts the unchanged query right after the savepoint's batch ``N``:

* state: version ``N + 1`` of every store, written by a tool run (:mod:`.state_io`); at
  another partition count the provider's rows are re-split by their stored Spark hash
  (:mod:`.resplit`), so each row lands where Spark's ``HashPartitioning`` sends its key;
* Spark's files, written after the state: source logs, operator metadata (with the new
  ``numPartitions``), schema files, the offset log up to ``N`` (with the new
  ``spark.sql.shuffle.partitions`` and the target provider class), the commit log up to
  ``N``, and ``metadata`` **last**: a target without ``metadata`` is not a checkpoint yet,
  so an interrupted restore can simply be run again;
* the query id: a new one by default (``keep_query_id=False``), as Flink gives a restored
  job a new id. Two checkpoints with one id would share process state locations under a
  root (``<root>/<query id>/<name>``) and exactly-once sinks that key on the query id (Delta's
  ``txnAppId``); keep the id when the restored query replaces the original and its sink
  must see the same query.
* the provider: spark-state's (the state is written as its stores), also for a savepoint of
  a checkpoint of Spark's HDFS or RocksDB provider -- restoring one is a migration;
* process state: written at the savepoint's layout (same parallelism) into the new query's
  location: the one named in ``process_locations`` (required for a state that had an explicit
  ``state_location``), else ``<process_root>/<new query id>/<name>`` when ``process_root`` is
  given, else where the restored query started with the original's options looks -- beside the
  new checkpoint (``<new checkpoint>/spark-state/<name>``) for state the original kept beside
  its checkpoint or at the former default ``./spark-state/<query id>/<name>``, and
  ``<its state_root>/<new query id>/<name>`` for state kept under a ``state_root``. Its runtime
  rescales by key group if the query runs it at another parallelism (see :mod:`.rescale`).

Every file read from the savepoint is checked against the manifest's size and CRC-32 first;
state files are read one record batch at a time from a local, memory-mapped copy
(:mod:`.state_files`), never whole.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..config import EngineConfig
from ..deprecation import warn_renamed
from ..storage import CheckpointStorage, open_storage
from . import savepoint_format as F
from ..spark.logs import OffsetEntry
from .checkpoint_reader import (PROVIDER_CLASS_CONF, SHUFFLE_PARTITIONS_CONF, SPARKSTATE_PROVIDER, OperatorInfo,
                                SparkCheckpoint, StoreInfo)
from .errors import SavepointError, TargetExistsError
from .process_locations import CHECKPOINT, FORMER_DEFAULT, beside_checkpoint
from .progress import Progress
from .resplit import SINGLE_PARTITION_OPERATORS, Split, write_split
from .savepoint_manifest import read_manifest, read_verified
from .state_files import read_state_batches, read_state_entries
from .state_io import new_tool_run_id, write_process_layout
from ..process import location as L

#: split_writer(op, store entry, split, version) -> keys: writes a re-split store for another provider
SplitWriter = Callable[[OperatorInfo, F.StoreEntry, Split, int], int]


@dataclass
class RestoreResult:
    checkpoint: str
    savepoint: str
    batch_id: int
    query_id: str
    partitions: int
    provider_class: str
    process_locations: dict[str, str]
    keys: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _former_options(fn: Callable[..., "RestoreResult"]) -> Callable[..., "RestoreResult"]:
    """``restore(savepoint_options=S, storage_options=C)`` of the former release, where ``S`` was
    the savepoint's and ``C`` the new checkpoint's, becomes ``storage_options=S,
    target_storage_options=C``: it warns, naming the new arguments."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> "RestoreResult":
        if "savepoint_options" in kwargs:
            if "target_storage_options" in kwargs:
                raise TypeError("restore() got both savepoint_options= (deprecated) and target_storage_options=: "
                                "give storage_options= and target_storage_options= only")
            warn_renamed("restore(savepoint_options=S, storage_options=C)",
                         "restore(storage_options=S, target_storage_options=C)")
            kwargs["target_storage_options"] = dict(kwargs.pop("storage_options", None) or {})
            kwargs["storage_options"] = kwargs.pop("savepoint_options")
        return fn(*args, **kwargs)

    return wrapper


@_former_options
def restore(savepoint_dir: str, new_checkpoint: str, *, partitions: Optional[int] = None, backend: str = "rocksdb",
            keep_query_id: bool = False, process_root: Optional[str] = None,
            process_locations: Optional[dict[str, str]] = None, storage_options: Optional[dict[str, str]] = None,
            target_storage_options: Optional[dict[str, str]] = None, progress: bool = True,
            provider_class: Optional[str] = None, split_writer: Optional[SplitWriter] = None) -> RestoreResult:
    """Create ``new_checkpoint`` from the savepoint (see the module docstring).

    ``storage_options`` (``s3.*``, ``retry.*``, ``hdfs.*``) apply to every location the call reads
    or writes: the savepoint, the new checkpoint and the process state it writes (a location
    ignores the options of other schemes). ``target_storage_options``, when given, replace them
    for the locations written (the new checkpoint and its process state).

    ``provider_class`` and ``split_writer`` are for ``migrate``: another target provider and
    the writer of its store format."""
    started = time.perf_counter()
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise ValueError(f"--partitions must be a positive integer, got {partitions!r}")
    if backend not in ("rocksdb", "hashmap"):
        raise ValueError(f"--backend must be rocksdb or hashmap, got {backend!r}")
    sp = open_storage(savepoint_dir, dict(storage_options or {}))
    written_options = dict((storage_options if target_storage_options is None else target_storage_options) or {})
    manifest = read_manifest(sp)
    for entry in manifest.spark_files():  # cheap: check Spark's files before writing anything
        read_verified(sp, manifest, entry.path)
    target = SparkCheckpoint(new_checkpoint, written_options, must_exist=False)
    if target.storage.exists("metadata") or target.batch_ids("offsets"):
        raise TargetExistsError(f"{target.url} is already a checkpoint; restore into a new directory")
    n = partitions or manifest.partitions
    # Without a writer for another provider the state is written as spark-state stores, so
    # the checkpoint must name spark-state's provider (a savepoint of a checkpoint of Spark's
    # HDFS or RocksDB provider restores as a spark-state checkpoint). A query without
    # provider state keeps its provider.
    provider = provider_class or (SPARKSTATE_PROVIDER if manifest.operators else manifest.provider_class)
    query_id = manifest.query_id if keep_query_id else str(uuid.uuid4())
    version = manifest.state_version
    config = EngineConfig(backend=backend, snapshot_interval=0)
    run_id = new_tool_run_id("restore")
    keys = 0
    bar = Progress("restore", unit="rows", enabled=progress)
    targets = _process_targets(manifest, target.storage, query_id, process_root, process_locations or {})
    beside = beside_checkpoint(target.storage)
    for name, url in targets.items():
        # State beside the new checkpoint (not a checkpoint yet) is an interrupted restore's:
        # written again, by a later tool run, whose copies supersede it.
        if url != beside.full_url(name) and open_storage(url, written_options).exists(L.META_FILE):
            raise TargetExistsError(
                f"the state location {url} of process operator {name!r} already holds state; pass "
                f"--process-root or --process-location {name}=<new location>")
    try:
        ops = []
        for op in manifest.operators:
            info = OperatorInfo(op.id, op.name, tuple(StoreInfo(s.name, s.num_cols_prefix_key, n) for s in op.stores))
            ops.append(info)
            for store in op.stores:
                # re-split through a local spool file: a store's rows are never held in memory
                with Split(n, single_partition=op.name in SINGLE_PARTITION_OPERATORS) as split:
                    for p in range(op.partitions):
                        for batch in read_state_batches(sp, manifest, F.state_file(op.id, store.name, p)):
                            split.add(batch)
                            bar.update(batch.num_rows)
                    if split_writer is not None:
                        keys += split_writer(info, store, split, version)
                    else:
                        def store_of(p: int, info: Any = info, s: str = store.name) -> CheckpointStorage:
                            return target.store_storage(info, p, s)

                        keys += write_split(split, store_of, version, config, run_id)
        for proc in manifest.process:
            storage = open_storage(targets[proc.name], written_options)

            def partition_entries(i: int, proc=proc):
                return read_state_entries(sp, manifest, F.process_file(proc.name, i))

            write_process_layout(storage, proc.kind, proc.max_parallelism, proc.parallelism, version,
                                 ((i, partition_entries(i)) for i in range(proc.parallelism)), config, run_id,
                                 proc.key)
            for sp_path, rel in F.process_time_files(manifest, proc.name):
                storage.write_bytes(rel, read_verified(sp, manifest, sp_path))
        _write_spark_files(sp, manifest, target, n, provider, query_id)
    finally:
        bar.close()
    return RestoreResult(target.url, sp.url, manifest.batch_id, query_id, n, provider, targets, keys,
                         round(time.perf_counter() - started, 3))


def _process_targets(manifest: F.SavepointManifest, target: CheckpointStorage, query_id: str, root: Optional[str],
                     explicit: dict[str, str]) -> dict[str, str]:
    """Where the restored query keeps each process state (see the module docstring)."""
    out = {}
    for proc in manifest.process:
        if proc.name in explicit:
            out[proc.name] = explicit[proc.name]
        elif root:
            out[proc.name] = f"{root.rstrip('/')}/{query_id}/{proc.name}"
        elif proc.placement in (CHECKPOINT, FORMER_DEFAULT):
            out[proc.name] = beside_checkpoint(target).full_url(proc.name)
        elif proc.under_root:
            out[proc.name] = f"{proc.under_root.rstrip('/')}/{query_id}/{proc.name}"
        else:
            raise SavepointError(
                f"process operator {proc.name!r} kept its state at an explicit state_location ({proc.location}); "
                f"say where the restored query keeps it: --process-location {proc.name}=<new location> "
                "(and pass the same state_location= to keyed_process)")
    return out


def _write_spark_files(sp: CheckpointStorage, manifest: F.SavepointManifest, target: SparkCheckpoint, n: int,
                       provider: str, query_id: str) -> None:
    prefix = F.SPARK_DIR + "/"
    files = [f.path[len(prefix):] for f in manifest.spark_files()]
    order = sorted(files, key=lambda p: (p == "metadata", p.startswith("commits/"), p.startswith("offsets/"), p))
    for path in order:
        data = read_verified(sp, manifest, prefix + path)
        if path.startswith("offsets/"):
            entry = OffsetEntry.decode(int(path.split("/")[1]), data, path)
            data = entry.with_conf(**{SHUFFLE_PARTITIONS_CONF: str(n), PROVIDER_CLASS_CONF: provider}).encode()
        elif path.startswith("state/") and path.endswith("/_metadata/metadata"):
            doc = json.loads(data.decode("utf-8").split("\n", 1)[1] if data.startswith(b"v") else data)
            for info in doc.get("stateStoreInfo", []):
                info["numPartitions"] = n
            data = (b"v1\n" if data.startswith(b"v1\n") else b"") + json.dumps(doc, separators=(",", ":")).encode()
        elif path == "metadata":
            doc = json.loads(data)
            doc["id"] = query_id
            data = json.dumps(doc, separators=(",", ":")).encode()
        target.write_log_file(path, data)
