"""Rewrite a stopped query's state in place, as a new batch that reads no new input.

The machinery of the in-place tools -- rescale (:mod:`.rescale`, to another partition count) and
erasure (:mod:`spark_state.state_data.writers.erase`, without some keys): both give the query a batch
``N+1`` whose state is a rewritten copy of batch ``N``'s.

1. refuse a running query: :func:`check_stopped` (a batch with offsets but no commit) and
   :func:`check_live_stores` (a store of either kind -- a Spark operator's on spark-state's
   provider, or a keyed function's -- holding a version past the last committed batch's);
2. from the last committed batch ``N`` write ``offsets/N+1``: the same source offsets and
   metadata as ``N``, with ``spark.sql.shuffle.partitions`` set to the new count -- a batch
   that reads no new input;
3. write state version ``N+2`` of every store of every operator, re-split into the new
   partitions (:mod:`.resplit`), as a tool run (see :mod:`.state_io`); process state gets batch
   version ``N+2`` as a rewritten copy of ``N+1`` in a new layout of the same parallelism;
4. rewrite each operator's metadata (``numPartitions``);
5. write ``commits/N+1`` last: the commit point.

Interrupted anywhere before step 5, the checkpoint's last committed batch is still ``N`` and
``offsets/N+1`` names the interrupted rewrite (its marker file ``_spark_state_rescale/N+1.json``
says so), so running the same command again redoes every step: state versions are rewritten
by a new tool run, which supersedes the interrupted one's copies (run rules), and the Spark
files are overwritten. Old batches stay readable: nothing below version ``N+2`` is touched,
and partitions beyond a smaller new count keep their files.

Limits of the liveness checks, said plainly: a query idle between batches (all batches
committed, waiting for data) leaves no trace a reader can see; stop the query first.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from ..checkpoint.retention import list_copies
from ..checkpoint.runs import RunRegistry
from ..engine.changes import is_tool_run
from ..process import location as L
from ..storage import CheckpointStorage
from .checkpoint_reader import (SHUFFLE_PARTITIONS_CONF, SPARKSTATE_PROVIDER, OperatorInfo, SparkCheckpoint,
                                provider_short_name)
from .errors import QueryRunningError, UnsupportedCheckpointError
from .process_locations import ProcessLocation, find_process_locations
from .progress import Progress
from .resplit import SINGLE_PARTITION_OPERATORS, Split, batches_of, write_split
from .state_io import (new_tool_run_id, process_entries, process_layout, reader_config, store_entries,
                       write_process_layout)

__all__ = ["MARKER_DIR", "Rewrite", "check_live_stores", "check_stopped", "prepare_rewrite", "rewrite_as_new_batch"]

#: Where a rewrite's marker (``<batch>.json``) says that an uncommitted batch is an interrupted rewrite.
MARKER_DIR = "_spark_state_rescale"


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
    #: the query's keyed-function (process) state locations
    processes: list[ProcessLocation]


def prepare_rewrite(checkpoint: str, storage_options: Optional[dict[str, str]], force: bool, operation: str, *,
                    process_root: Optional[str] = None,
                    process_locations: Optional[dict[str, str]] = None) -> Rewrite:
    """The checks before :func:`rewrite_as_new_batch`: a stopped query (or one whose last batch
    is an interrupted rewrite of ours, which is redone; see :func:`check_stopped` and
    :func:`check_live_stores`) on spark-state's provider if it has Spark operators. Finds the
    query's process state locations (``process_root``, ``process_locations`` as
    :func:`~.process_locations.find_process_locations` takes them)."""
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
    processes = find_process_locations(ckpt.storage, ckpt.query_id(), process_root, dict(process_locations or {}),
                                       dict(storage_options or {}))
    if not force:
        check_live_stores(ckpt, operators, partitions, processes, last)
    return Rewrite(ckpt, last, partitions, operators, operation, processes)


#: What a rewrite writes for one process state location, partition by partition:
#: ``(location, layout of the last batch, partition) -> entries`` (default: a plain copy).
ProcessEntries = Callable[[ProcessLocation, L.Layout, int], Iterable[tuple[bytes, bytes]]]
#: store_entries_of(operator, store name, partition) -> the entries a rewrite writes for that store
StoreEntries = Callable[[OperatorInfo, str, int], Iterable[tuple[bytes, bytes]]]


def rewrite_as_new_batch(rewrite: Rewrite, partitions: int, progress: bool,
                         process_entries_of: Optional[ProcessEntries] = None,
                         store_entries_of: Optional[StoreEntries] = None) -> tuple[list[dict[str, Any]], int]:
    """Steps 2-5 of the module docstring: batch ``last + 1`` reading no new input, whose state
    (version ``last + 2``) is every provider store's ``store_entries_of`` (a copy by default)
    re-split into ``partitions`` and every process state location's ``process_entries_of`` (a
    copy by default), committed last. Returns the operators' summaries and the rows moved."""
    ckpt, last, old, operators, operation = (rewrite.ckpt, rewrite.last, rewrite.partitions, rewrite.operators,
                                             rewrite.operation)
    processes = rewrite.processes
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


def check_live_stores(ckpt: SparkCheckpoint, operators: list[OperatorInfo], partitions: int,
                      processes: Iterable[ProcessLocation], last: Optional[int], force_option: bool = True) -> None:
    """Refuse a checkpoint whose query is committing a batch: a store of either kind -- a Spark
    operator's store on spark-state's provider, or a keyed function's store in its process state
    location -- holding a version past the last committed batch's (``last + 1``; any version
    when no batch is committed). Versions that only tool runs wrote (an interrupted rewrite of
    ours, which the next one supersedes) do not count. ``force_option``: the operation has
    ``--force`` (the message names it).

    :raises QueryRunningError: naming the store, the version and what to do.
    """
    committed = 0 if last is None else last + 1
    for op in operators:
        for store in op.store_names:
            for p in range(partitions):
                storage = ckpt.store_storage(op, p, store)
                _refuse_newer(storage, list_copies(storage), committed, storage, ckpt.url, force_option)
    for loc in processes:
        source = loc.storage()
        for lay in L.list_layouts(source):
            for i in range(lay.parallelism):
                partition = source.child(lay.store_path(i))
                copies = {v + lay.base: ranks for v, ranks in list_copies(partition).items()}
                _refuse_newer(partition, copies, committed, source, ckpt.url, force_option)


def _refuse_newer(store: CheckpointStorage, copies: dict[int, list[int]], committed: int,
                  registry: CheckpointStorage, where: str, force_option: bool) -> None:
    """``copies``: batch version -> ranks of the store's copies; ``registry``: where the run
    registry that ranks them lives (the provider store itself, or a process state location)."""
    newer = [v for v in copies if v > committed]
    if not newer:
        return
    tool_runs = {r.seq for r in RunRegistry(registry).history().runs if is_tool_run(r.run_id)}
    if all(set(copies[v]) <= tool_runs for v in newer):
        return
    raise QueryRunningError(
        f"{store.url} holds batch version {max(newer)}, past the last committed batch's ({committed}): a query "
        f"is committing a batch on {where}. Stop it first"
        + (" (or pass --force if you know it is stopped and the batch was abandoned)" if force_option else ""))
