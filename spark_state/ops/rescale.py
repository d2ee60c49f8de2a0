"""Re-splitting provider state into another partition count, and in-place rescale.

**The re-split** (shared by restore at another count and by in-place rescale). A provider
data key starts with ``[key group u16][Spark hash i32]`` and the hash is Spark's own
partitioning hash of the key's partitioning columns, so a row's partition at count ``n`` is
``pmod(hash, n)`` -- exactly where Spark's ``HashPartitioning`` sends the row's input. System
keys follow the data key they name (TTL expiry index entries) or go to every partition
(per-store records such as the TTL format marker). Key layouts and the vectorised routing
over Arrow record batches (numpy on the binary array's offset and data buffers, a few
nanoseconds per row) are in :mod:`spark_state.keys.provider`; the re-split rows are spooled to
a local Arrow file (:class:`Split`), so a store of any size is re-split in bounded memory.

**Process state** (``keyed_process`` / ``checkpointed_process``) is *not* re-split here. Its
runtime already rescales by key group (and redistributes operator state) at the first
batch run at another ``parallelism`` -- the same code path for a restart, a restore and an
in-place rescale, so online and offline rescale of process state are one implementation
(``spark_state/process/stores.py`` + ``state/rescale.py``). Its parallelism is an argument of
``keyed_process``, not Spark's pinned partition count, so the tools keep its layout and the
next run moves the state if the parallelism differs.

**In-place rescale** (:func:`rescale`), like Spark's offline repartition but for every
operator spark-state's provider runs and for process state:

1. refuse a running query (see :func:`check_stopped`);
2. from the last committed batch ``N`` write ``offsets/N+1``: the same source offsets and
   metadata as ``N``, with ``spark.sql.shuffle.partitions`` set to the new count -- a batch
   that reads no new input;
3. write state version ``N+2`` of every store of every operator, re-split into the new
   partitions, as a tool run (see :mod:`.state_io`); process state gets batch version
   ``N+2`` as a copy of ``N+1`` in a new layout of the same parallelism;
4. rewrite each operator's metadata (``numPartitions``);
5. write ``commits/N+1`` last: the commit point.

Interrupted anywhere before step 5, the checkpoint's last committed batch is still ``N`` and
``offsets/N+1`` names the interrupted rescale (its marker file ``_spark_state_rescale/N+1.json``
says so), so running the same command again redoes every step: state versions are rewritten
by a new tool run, which supersedes the interrupted one's copies (run rules), and the Spark
files are overwritten. Old batches stay readable: nothing below version ``N+2`` is touched,
and partitions beyond a smaller new count keep their files.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ..checkpoint.runs import RunRegistry
from ..engine.changes import is_tool_run
from ..checkpoint.retention import list_copies
from ..config import EngineConfig
from ..keys.provider import MalformedProviderKeyError, route_hashes
from ..process import location as L
from ..storage import CheckpointStorage
from . import savepoint_format as F
from .checkpoint_reader import (SHUFFLE_PARTITIONS_CONF, SPARKSTATE_PROVIDER, OperatorInfo, SparkCheckpoint,
                                provider_short_name)
from .errors import QueryRunningError, UnsupportedCheckpointError
from .progress import Progress
from .process_locations import ProcessLocation, find_process_locations
from .state_io import (import_store, new_tool_run_id, process_entries, process_layout,
                       reader_config, store_entries, write_process_layout)

_LOG = logging.getLogger(__name__)

MARKER_DIR = "_spark_state_rescale"
#: Operators whose state lives in partition 0 whatever the partition count: streaming
#: ``limit`` (``StreamingGlobalLimitExec``) runs its stateful step in one task after an
#: exchange to a single partition, and its key (one null ``void`` column) hashes to the seed,
#: not to partition 0. Their rows stay in partition 0.
SINGLE_PARTITION_OPERATORS = frozenset({"globalLimit"})
#: Fault injection for tests of an interrupted rescale: the process exits abruptly after
#: writing this many partition stores. Never set it in production.
CRASH_AFTER_STORES_ENV = "SPARK_STATE_TESTING_RESCALE_EXIT_AFTER_STORES"


# ------------------------------------------------------------------------------ routing
def partition_of_rows(keys: pa.BinaryArray, n: int) -> np.ndarray:
    """Target partition of every key at count ``n``; ``-1`` for keys that go to every partition."""
    try:
        hashes, everywhere = route_hashes(keys)
    except MalformedProviderKeyError as exc:
        raise UnsupportedCheckpointError(str(exc)) from None
    parts = np.mod(hashes, n)
    parts[everywhere] = -1
    return parts


def batches_of(entries: Iterable[tuple[bytes, bytes]], rows: int = F.BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    ks: list[bytes] = []
    vs: list[bytes] = []
    for k, v in entries:
        ks.append(k)
        vs.append(v)
        if len(ks) >= rows:
            yield pa.record_batch([pa.array(ks, pa.binary()), pa.array(vs, pa.binary())], schema=F.SCHEMA)
            ks, vs = [], []
    if ks:
        yield pa.record_batch([pa.array(ks, pa.binary()), pa.array(vs, pa.binary())], schema=F.SCHEMA)


class Split:
    """Rows of one store routed to ``n`` partitions, spooled to a local Arrow file.

    Bounded memory: a store's rows (every partition of it, possibly GBs) are never held. Each
    batch given to :meth:`add` is split by target partition and its parts are appended at once
    to one Arrow IPC file in ``scratch_dir`` (default: the system's temp directory); only the
    index of which record batches belong to which partition stays in memory. Reading
    (:meth:`batches`, :meth:`entries`) closes the file for writing and maps it: a partition's
    rows come back in the order they were added, one record batch at a time. :meth:`close`
    (or the end of a ``with`` block) deletes the file; a split that is dropped unclosed deletes
    it when collected."""

    def __init__(self, n: int, single_partition: bool = False, scratch_dir: Optional[str] = None) -> None:
        self.n = n
        #: every row to partition 0 (see ``SINGLE_PARTITION_OPERATORS``)
        self.single_partition = single_partition
        self.rows = 0
        self._scratch_dir = scratch_dir
        self._index: list[list[int]] = [[] for _ in range(n)]  # partition -> its batches in the file
        self._part_rows = [0] * n
        self._written = 0
        self._path: Optional[str] = None
        self._sink: Optional[pa.NativeFile] = None
        self._writer: Optional[pa.ipc.RecordBatchFileWriter] = None
        self._reader: Optional[pa.ipc.RecordBatchFileReader] = None
        self._source: Optional[pa.MemoryMappedFile] = None
        self._finalizer: Optional[weakref.finalize] = None

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        if self.single_partition:
            self._append(0, batch)
            return
        targets = partition_of_rows(batch.column(0), self.n)
        everywhere = targets == -1
        for p in range(self.n):
            mask = (targets == p) | everywhere
            if mask.any():
                self._append(p, batch.filter(pa.array(mask)))

    def _append(self, partition: int, batch: pa.RecordBatch) -> None:
        if self._reader is not None:
            raise RuntimeError("rows added to a split that is being read")
        if self._writer is None:
            fd, self._path = tempfile.mkstemp(prefix="spark-state-split-", suffix=".arrow", dir=self._scratch_dir)
            os.close(fd)
            self._finalizer = weakref.finalize(self, _remove, self._path)
            self._sink = pa.OSFile(self._path, "wb")
            self._writer = pa.ipc.new_file(self._sink, F.SCHEMA)
        self._writer.write_batch(batch)
        self._index[partition].append(self._written)
        self._part_rows[partition] += batch.num_rows
        self._written += 1

    def rows_of(self, partition: int) -> int:
        """The rows routed to ``partition``."""
        return self._part_rows[partition]

    def batches(self, partition: int) -> Iterator[pa.RecordBatch]:
        """``partition``'s rows as record batches (views of the mapped file), in the order added."""
        if not self._index[partition]:
            return
        if self._reader is None:
            assert self._writer is not None and self._sink is not None and self._path is not None
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None
            self._source = pa.memory_map(self._path)
            self._reader = pa.ipc.open_file(self._source)
        for i in self._index[partition]:
            yield self._reader.get_batch(i)

    def entries(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        for batch in self.batches(partition):
            yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())

    def close(self) -> None:
        """Delete the spooled rows (idempotent)."""
        for f in (self._writer, self._sink, self._source):
            if f is not None:
                f.close()
        self._writer = self._sink = self._source = self._reader = None
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> "Split":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_split(split: Split, store_storage: Callable[[int], Any], version: int, config: EngineConfig,
                run_id: str, progress: Optional[Progress] = None) -> int:
    """Write ``version`` of each of the split's partitions; returns the keys written."""
    keys = 0
    # A single-partition operator's other stores are never written by Spark either: a store
    # at a version its partition never runs would break the next savepoint's reads.
    for p in range(1 if split.single_partition else split.n):
        keys += import_store(store_storage(p), version, split.entries(p), config, run_id)
        _maybe_crash()
        if progress is not None:
            progress.update(split.rows_of(p))
    return keys


# ------------------------------------------------------------------------------ in place
@dataclass
class RescaleResult:
    checkpoint: str
    batch_id: int
    old_partitions: int
    new_partitions: int
    operators: list[dict[str, Any]]
    process_states: list[str]
    keys: int
    #: entries moved (data and system keys)
    rows: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_stopped(ckpt: SparkCheckpoint, last_committed: int, resume_marker: bool, operation: str = "rescale",
                  force_option: bool = True) -> None:
    """Refuse a checkpoint a query is (or may be) running on.

    Signs of a live query: (a) its newest offset log entry has no commit -- a batch is under
    way -- unless that entry is an interrupted rescale of ours (``resume_marker``);
    (b) any store holds a committed version past the last committed batch's (a batch being
    committed). Limits, said plainly: a query idle between batches (all batches committed,
    waiting for data) leaves no trace a reader can see; a query stopped by a crash in the
    middle of a batch looks like (a). Stop the query first; after a crash, run it once to
    finish its batch (or rescale anyway, knowing it was stopped: ``force=True``).
    ``operation`` names the operation in the message; ``force_option``: it has ``--force``.
    """
    offsets = ckpt.batch_ids("offsets")
    if offsets and offsets[-1] > last_committed and not resume_marker:
        raise QueryRunningError(
            f"{ckpt.url}: batch {offsets[-1]} has offsets but no commit: the query is running (or "
            "stopped in the middle of a batch). Stop the query and let it finish its batch (restart "
            f"it once and stop it after a batch), then {operation}"
            + ("; or pass --force if you know it is stopped" if force_option else ""))


def rescale(checkpoint: str, partitions: int, *, process_root: Optional[str] = None,
            process_locations: Optional[dict[str, str]] = None, storage_options: Optional[dict[str, str]] = None,
            force: bool = False, progress: bool = True) -> RescaleResult:
    """Change the partition count of a stopped query's checkpoint in place (module docstring)."""
    if not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"--partitions must be a positive integer, got {partitions!r}")
    started = time.perf_counter()
    rewrite = prepare_rewrite(checkpoint, storage_options, force, "rescale")
    ckpt, last, old = rewrite.ckpt, rewrite.last, rewrite.partitions
    if old == partitions:
        raise ValueError(
            f"{ckpt.url} already has {partitions} partitions (spark.sql.shuffle.partitions of batch {last})")
    processes = find_process_locations(ckpt.storage, ckpt.query_id(), process_root, process_locations or {},
                                       storage_options or {})
    op_summaries, total_rows = rewrite_as_new_batch(rewrite, partitions, processes, progress)
    return RescaleResult(ckpt.url, last + 1, old, partitions, op_summaries, [p.name for p in processes],
                         sum(o["keys"] for o in op_summaries), total_rows, round(time.perf_counter() - started, 3))


@dataclass(frozen=True)
class Rewrite:
    """A checkpoint :func:`prepare_rewrite` found ready for :func:`rewrite_as_new_batch`."""

    ckpt: SparkCheckpoint
    #: its last committed batch
    last: int
    #: its partition count at that batch
    partitions: int
    operators: list[OperatorInfo]
    #: names the operation in messages, the marker, the progress bar and the tool run's id
    operation: str


def prepare_rewrite(checkpoint: str, storage_options: Optional[dict[str, str]], force: bool,
                    operation: str) -> Rewrite:
    """The checks before :func:`rewrite_as_new_batch`: a stopped query (or one whose last batch
    is an interrupted rewrite of ours, which is redone) on spark-state's provider if it has
    Spark operators."""
    ckpt = SparkCheckpoint(checkpoint, storage_options)
    last = ckpt.committed_batch()
    offsets = ckpt.batch_ids("offsets")
    resuming = bool(offsets) and offsets[-1] == last + 1 and ckpt.storage.exists(f"{MARKER_DIR}/{last + 1}.json")
    if not force:
        check_stopped(ckpt, last, resuming, operation)
    provider = ckpt.provider_class(last)
    operators = ckpt.operators()
    if provider != SPARKSTATE_PROVIDER and operators:
        raise UnsupportedCheckpointError(
            f"{ckpt.url} uses {provider_short_name(provider)}'s state store provider; in-place {operation} works on "
            "spark-state checkpoints. Migrate it first: python -m spark_state migrate <checkpoint> <new checkpoint> "
            f"--to spark-state, then {operation} the new checkpoint")
    partitions = ckpt.partitions(last)
    _check_live_stores(ckpt, operators, partitions, last + 1, force)
    return Rewrite(ckpt, last, partitions, operators, operation)


#: What a rewrite writes for one process state location, partition by partition:
#: ``(location, layout of the last batch, partition) -> entries`` (default: a plain copy).
ProcessEntries = Callable[[ProcessLocation, L.Layout, int], Iterable[tuple[bytes, bytes]]]
#: store_entries_of(operator, store name, partition) -> the entries a rewrite writes for that store
StoreEntries = Callable[[OperatorInfo, str, int], Iterable[tuple[bytes, bytes]]]


def rewrite_as_new_batch(rewrite: Rewrite, partitions: int, processes: list[ProcessLocation], progress: bool,
                         process_entries_of: Optional[ProcessEntries] = None,
                         store_entries_of: Optional[StoreEntries] = None) -> tuple[list[dict[str, Any]], int]:
    """Steps 2-5 of the module docstring: batch ``last + 1`` reading no new input, whose state
    (version ``last + 2``) is every provider store's ``store_entries_of`` (a copy by default)
    re-split into ``partitions`` and every process state location's ``process_entries_of`` (a
    copy by default), committed last. Returns the operators' summaries and the rows moved."""
    ckpt, last, old, operators, operation = (rewrite.ckpt, rewrite.last, rewrite.partitions, rewrite.operators,
                                             rewrite.operation)
    state_version = last + 1
    new_batch = last + 1
    config = reader_config()
    run_id = new_tool_run_id(f"{operation.replace(' ', '-')}-b{new_batch}")

    def copy(loc: ProcessLocation, layout: L.Layout, i: int) -> Iterable[tuple[bytes, bytes]]:
        return process_entries(loc.storage(), layout, i, state_version, config)

    def copy_store(op: OperatorInfo, store: str, p: int) -> Iterable[tuple[bytes, bytes]]:
        return store_entries(ckpt.store_storage(op, p, store), state_version, config)

    entries_of = process_entries_of or copy
    stores_of = store_entries_of or copy_store
    # 1. the batch and a marker naming it ours (so that an interruption can be resumed)
    entry = ckpt.offset(last)
    ckpt.storage.write_bytes(f"{MARKER_DIR}/{new_batch}.json", json.dumps(
        {"batch_id": new_batch, "operation": operation, "from_partitions": old, "to_partitions": partitions,
         "run_id": run_id, "started_ms": int(time.time() * 1000)}).encode())
    ckpt.write_log_file(f"offsets/{new_batch}",
                        entry.with_conf(**{SHUFFLE_PARTITIONS_CONF: str(partitions)}).encode())
    # 2. the state
    total_rows = 0
    op_summaries: list[dict[str, Any]] = []
    bar = Progress(operation, unit="rows", enabled=progress)
    try:
        for op in operators:
            keys = 0
            for store in op.store_names:
                with Split(partitions, single_partition=op.name in SINGLE_PARTITION_OPERATORS) as split:
                    for p in range(old):
                        for batch in batches_of(stores_of(op, store, p)):
                            split.add(batch)
                            bar.update(batch.num_rows)
                    total_rows += split.rows

                    def target(p: int, op: Any = op, store: str = store) -> CheckpointStorage:
                        return ckpt.store_storage(op, p, store)

                    keys += write_split(split, target, state_version + 1, config, run_id)
            op_summaries.append({"id": op.id, "name": op.name, "keys": keys})
        for loc in processes:
            storage = loc.storage()
            layout = process_layout(storage, state_version)
            parts = ((i, entries_of(loc, layout, i)) for i in range(layout.parallelism))
            write_process_layout(storage, loc.kind, loc.max_parallelism, layout.parallelism, state_version + 1,
                                 parts, config, run_id)
        # 3. operator metadata, then the commit point
        for op in operators:
            ckpt.write_log_file(f"state/{op.id}/_metadata/metadata", op.with_partitions(partitions).encode_metadata())
        ckpt.write_log_file(f"commits/{new_batch}", ckpt.read(f"commits/{last}"))
    finally:
        bar.close()
    for name in ckpt.storage.list_dir(MARKER_DIR):  # ours, and any left by a rewrite that committed
        ckpt.storage.delete(f"{MARKER_DIR}/{name}")
    return op_summaries, total_rows


_stores_written = [0]


def _maybe_crash() -> None:
    import os

    limit = os.environ.get(CRASH_AFTER_STORES_ENV)
    if limit:
        _stores_written[0] += 1
        if _stores_written[0] >= int(limit):
            _LOG.error("fault injection: exiting after %d stores", _stores_written[0])
            os._exit(3)


def _check_live_stores(ckpt: SparkCheckpoint, operators: list[OperatorInfo], partitions: int, state_version: int,
                       force: bool) -> None:
    """A store holding a version past the last committed batch's means a batch is being
    committed now (a running query), unless it is our own interrupted rescale."""
    if force:
        return
    for op in operators:
        for store in op.store_names:
            for p in range(partitions):
                storage = ckpt.store_storage(op, p, store)
                copies = list_copies(storage)
                newer = [v for v in copies if v > state_version]
                if not newer:
                    continue
                tool_runs = {r.seq for r in RunRegistry(storage).history().runs
                             if is_tool_run(r.run_id)}
                if all(set(copies[v]) <= tool_runs for v in newer):
                    continue
                raise QueryRunningError(
                    f"{storage.url} holds version {max(newer)}, past the last committed batch's "
                    f"({state_version}): a query is committing a batch on {ckpt.url}. Stop it first (or "
                    "pass --force if you know it is stopped and the batch was abandoned)")
