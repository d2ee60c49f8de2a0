"""Task side: what runs inside ``mapInArrow`` for one partition of one micro-batch.

Both runners follow the same protocol:

1. read ``streaming.sql.batchId`` (batch ``B``) and ``sql.streaming.queryId`` from the task's
   local properties, resolve the state location, check its ``_operator.json``;
2. :func:`~spark_state.process.stores.acquire` the partition's store at batch version ``B``
   (cached, loaded, or built by a rescale: keyed state by key group with
   :mod:`spark_state.state.regroup`, operator state with
   :func:`~.operator_state.redistribute`);
3. run the function over the partition's Arrow batches, emitting output batches as they fill:
   keyed functions in the keyed loop (:mod:`.keyed_loop`), ``checkpointed_process`` functions
   row by row (:func:`_operator_loop`);
4. when the input is exhausted: TTL cleanup (keyed) or ``snapshot_state`` plus the write-back
   of operator state, ``close()``, and the commit of version ``B + 1``;
5. the task's observation row (:mod:`.observation`), which the query's progress shows.

Any exception (in the function, the input, or the commit) discards the pending writes and
closes the store before it propagates, so Spark's retry of the task starts again from
version ``B`` in checkpoint storage: state is exactly-once under retries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import pyarrow as pa

from ..checkpoint.runs import RunContext
from ..partitioning.keygroups import KeyGroupRange
from ..state.regroup import copy_owned_key_groups, overlapping_partitions, owned_key_groups
from ..engine.store import VersionedStore
from ..testing import crashpoints
from .arrow_io import OutputWriter, columns_as_lists
from .errors import NotInStreamingQueryError, StateLocationError
from .functions import OperatorContext
from .gc_pacing import paced
from .keyed_input import BatchLayout
from .keyed_loop import LoopTask, keyed_loop
from .location import (
    BATCH_ID_PROPERTY,
    CHECKPOINT_ROOT_PROPERTY,
    JOB_DESCRIPTION_PROPERTY,
    JOB_GROUP_PROPERTY,
    QUERY_ID_PROPERTY,
    Layout,
    locate,
    run_context,
    run_id_of_task,
    storage_for,
    verify_location,
)
from .observation import ObservationWriter
from .operator_state import KEYED_OPERATOR_PREFIX, OperatorStateStore, redistribute
from .plan import ProcessPlan
from .spark_time import SparkOffsetLog
from .stores import PartitionStore, acquire, store_observation, task_output


@dataclass
class _Task(LoopTask):
    """A streaming task: its batch, partition and state location, and the query run it works for."""

    runs: RunContext


def _task(plan: ProcessPlan, partition: Optional[int] = None) -> _Task:
    from pyspark import TaskContext

    tc = TaskContext.get()
    raw = tc.getLocalProperty(BATCH_ID_PROPERTY) if tc is not None else None
    if tc is None or raw is None:
        raise NotInStreamingQueryError(
            f"{plan.function_name} runs only in a streaming query (no '{BATCH_ID_PROPERTY}' "
            "task property): keyed_process/checkpointed_process need a streaming DataFrame, "
            "started with writeStream")
    checkpoint_root = tc.getLocalProperty(CHECKPOINT_ROOT_PROPERTY)
    url = locate(plan.location, tc.getLocalProperty(QUERY_ID_PROPERTY), checkpoint_root)
    run_id = run_id_of_task({k: tc.getLocalProperty(k) for k in (JOB_DESCRIPTION_PROPERTY, JOB_GROUP_PROPERTY)})
    if run_id is None:
        raise NotInStreamingQueryError(
            f"{plan.function_name}: the task has no streaming query run id (local properties "
            f"'{JOB_GROUP_PROPERTY}' / '{JOB_DESCRIPTION_PROPERTY}', which Spark sets for every "
            "micro-batch); was the job group overridden?")
    crashpoints.set_role("process")  # crash tests may target the workers running process functions
    storage = storage_for(url, plan.location.storage_options)
    verify_location(storage, plan.kind, plan.max_parallelism, plan.key_record)
    part = tc.partitionId() if partition is None else partition
    offset_log = SparkOffsetLog(checkpoint_root, plan.location.storage_options) if checkpoint_root else None
    return _Task(int(raw), part, url, storage, offset_log, run_context(storage, run_id))


def _check_parallelism(plan: ProcessPlan, partition: int) -> None:
    if partition >= plan.parallelism:  # pragma: no cover - repartition(n) guarantees it
        raise StateLocationError(f"partition {partition} out of range for parallelism {plan.parallelism}")


# ------------------------------------------------------------------------------------ keyed
def run_keyed(plan: ProcessPlan, batches: Iterator[pa.RecordBatch],
              partition: Optional[int] = None) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of the keyed entry points. ``partition`` overrides the task's
    partition id (a carrier other than ``mapInArrow`` that groups rows by logical partition,
    as ``bench/keyed_bench.py`` measures with ``applyInPandasWithState``)."""
    task = _task(plan, partition)
    _check_parallelism(plan, task.partition)
    assert plan.max_parallelism is not None
    rebuild = _KeyedRebuild(plan.max_parallelism, plan.parallelism, task.partition,
                            plan.phases.operator_keyspace)
    ps = acquire(task.storage, plan.engine, plan.parallelism, task.partition, task.batch_id,
                 rebuild.sources_needed, rebuild.populate, task.runs)
    return paced(keyed_loop(plan, task, ps, rebuild.own, batches))


class _KeyedRebuild:
    """How a keyed partition's store is built from an old layout (a rescale): keyed state
    and timers by key group from the overlapping old partitions (:mod:`spark_state.state.regroup`);
    operator state (a keyed function's own, or broadcast state) redistributed from every old
    partition."""

    def __init__(self, max_parallelism: int, parallelism: int, partition: int, operator_state: bool) -> None:
        self.max_parallelism, self.parallelism, self.partition = max_parallelism, parallelism, partition
        self.operator_state = operator_state
        self.own: KeyGroupRange = owned_key_groups(max_parallelism, parallelism, partition)

    def sources_needed(self, old: Layout) -> list[int]:
        if self.operator_state:
            return list(range(old.parallelism))
        return overlapping_partitions(self.own, self.max_parallelism, old.parallelism)

    def populate(self, store: VersionedStore, old: Layout, old_stores: dict[int, VersionedStore]) -> None:
        copy_owned_key_groups(store, self.own, self.max_parallelism, old.parallelism, old_stores)
        if self.operator_state:
            redistribute(store, self.partition, self.parallelism, old_stores, KEYED_OPERATOR_PREFIX)


# --------------------------------------------------------------------------------- operator
def run_operator(plan: ProcessPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of :func:`~spark_state.process.checkpointed_process`."""
    task = _task(plan)
    n, partition = plan.parallelism, task.partition
    _check_parallelism(plan, partition)

    def sources_needed(old: Layout) -> list[int]:
        return list(range(old.parallelism))

    def populate(store, old: Layout, old_stores) -> None:
        redistribute(store, partition, n, old_stores)

    ps = acquire(task.storage, plan.engine, n, partition, task.batch_id, sources_needed, populate, task.runs)
    return paced(_operator_loop(plan, task, ps, batches))


def _operator_loop(plan: ProcessPlan, task: _Task, ps: PartitionStore,
                   batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    out = OutputWriter(plan.output_schema, plan.function_name, plan.task_schema)

    def observation() -> pa.RecordBatch:
        return ObservationWriter(plan.output_schema, {}).batch(store_observation(ps, task.batch_id))

    return task_output(ps, out, _operator_run(plan, task, ps, batches, out), observation)


def _operator_run(plan: ProcessPlan, task: _Task, ps: PartitionStore, batches: Iterator[pa.RecordBatch],
                  out: OutputWriter) -> Iterator[pa.RecordBatch]:
    states = OperatorStateStore(ps.store)
    ctx = OperatorContext(states, task.batch_id, task.partition, plan.parallelism,
                          task.batch_id > 0, task.url)
    fn = plan.function
    process = fn.process_element
    fn.initialize_state(ctx)
    fn.open(ctx)
    layout = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if layout is None:
            layout = BatchLayout(batch.schema, [])
        cols = columns_as_lists(batch, layout.input_idx)
        extend = out.rows.extend
        for row in map(layout.row_cls._make, zip(*cols)):
            produced = process(row, ctx)
            if produced is not None:
                extend(produced)
        if out.full:
            yield out.flush()
    fn.snapshot_state(ctx)
    states.flush()
    fn.close()
    ps.commit()
