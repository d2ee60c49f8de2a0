"""Run a keyed function offline: over the rows of one partition, against a store opened at a
state location, with no Spark streaming; give back what it wrote.

This is the one entry of the keyed runtime for work that is not a micro-batch -- a bootstrap of
keyed state from a DataFrame, a transform of a savepoint (:mod:`spark_state.state_data`). On the
driver, :func:`plan_offline` gives the plan and routes the rows as ``keyed_process``,
``keyed_co_process`` or ``keyed_broadcast_process`` does (their own plan builders); in each
task of a batch job over the routed rows, :func:`run_keyed_offline` runs the same keyed loop
(:mod:`.keyed_loop`) as a streaming task, as batch 0:

1. the partition's store (layout ``(parallelism, 0)``, batch version 0) is opened under the
   given location -- empty, or holding ``base`` (entries in key order) as version 1;
2. the keyed loop runs over the partition's rows (routed as :mod:`.routing` routes a streaming
   query's: the partition owns key groups ``owned_key_groups(max parallelism, parallelism,
   partition)``), with the plan's phases; its output rows and observation row are dropped;
3. the loop commits the store, which is *not* kept in the worker's store cache: the caller
   reads what was written (:meth:`OfflineRun.entries`, the committed entries in key order, one
   at a time from the store) and the run closes the store when its ``with`` block ends.

The location is the caller's (normally a scratch directory of the task); the time phase writes
its clock and event-time files there (:meth:`OfflineRun.maxima` lists the batch's maxima).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame

from ..engine.store import VersionedStore
from ..state.regroup import owned_key_groups
from ..storage import CheckpointStorage
from .api import plain_keyed_plan, plan_broadcast, plan_co, plan_keyed
from .clock import maxima_dir
from .event_time import EventTime
from .keyed_loop import LoopTask, keyed_loop
from .location import Layout
from .options import ProcessOptions
from .plan import BroadcastSpec, Phases, ProcessPlan
from .stores import PartitionStore

__all__ = ["OfflineRun", "plan_offline", "plan_offline_routed", "run_keyed_offline"]

#: An offline run is the first batch of its location.
_BATCH = 0


def plan_offline(df: DataFrame, keys: Sequence[str], key_fields: Sequence[Any], function: Any,
                 options: ProcessOptions, event_time: Optional[str] = None, *,
                 right: Optional[tuple[DataFrame, Sequence[str]]] = None,
                 broadcast: Optional[tuple[DataFrame, BroadcastSpec]] = None) -> tuple[ProcessPlan, DataFrame]:
    """The plan of an offline run of keyed ``function`` over ``df`` (driver side), and ``df``
    routed for it exactly as the streaming entry point routes a query's rows (one plan builder
    of :mod:`.api` for both): partition ``i`` of the routed DataFrame is the input of
    :func:`run_keyed_offline` for partition ``i``.

    One input: :func:`~.api.plan_keyed`, as :func:`~.api.keyed_process`. ``right`` (the second
    input and its key columns; their types must equal ``df``'s keys', checked by the caller):
    :func:`~.api.plan_co`, as :func:`~.api.keyed_co_process`. ``broadcast`` (the broadcast input
    and its states and order): :func:`~.api.plan_broadcast`, as
    :func:`~.api.keyed_broadcast_process`. Not both.

    The plan has the bootstrap phase: the time phase runs without firing, and timers of both
    domains may be registered for the query that restores the state. ``event_time``: the column
    of each row of ``df`` with its event time (read by side, the batch's event-time maxima
    recorded; the other input has none)."""
    if right is not None and broadcast is not None:
        raise ValueError("an offline run has a second input or a broadcast input, not both")
    time = EventTime(event_time, 0) if event_time else None
    if right is not None:
        phases = Phases(event_time=time is not None, two_inputs=True, bootstrap=True)
        other, right_keys = right
        return plan_co(df, other, keys, right_keys, key_fields, function, options, phases, (time, None), None)
    if broadcast is not None:
        other, spec = broadcast
        phases = Phases(event_time=time is not None, broadcast=spec, bootstrap=True)
        return plan_broadcast(df, other, keys, key_fields, function, options, phases, time, None)
    return plan_keyed(df, keys, key_fields, function, options, Phases(event_time=time is not None, bootstrap=True),
                      time, None)


def plan_offline_routed(key_fields: Sequence[Any], function: Any, options: ProcessOptions) -> ProcessPlan:
    """The plan :func:`plan_offline` gives for one input without event time, without a DataFrame:
    for a caller that routes the rows itself (key group ``pmod(hash(key columns), max
    parallelism)`` in the hidden key group column, partition by Flink's operator index, as
    :mod:`.routing` does in Spark SQL) and hands each partition's rows to :func:`run_keyed_offline`."""
    return plain_keyed_plan(key_fields, function, options, Phases(event_time=False, bootstrap=True))


@dataclass
class OfflineRun:
    """What an offline run wrote: the committed store of its partition, and the rows it read."""

    partition: int
    #: input rows the function saw
    input_rows: int
    _store: VersionedStore
    _storage: CheckpointStorage

    def entries(self) -> Iterator[tuple[bytes, bytes]]:
        """The committed store's entries (state, timers, TTL index, schema records), in key order."""
        return self._store.iterate()

    def maxima(self) -> list[str]:
        """The names of the batch's event-time maxima files (empty without event time)."""
        return self._storage.list_dir(maxima_dir(_BATCH))


@contextlib.contextmanager
def run_keyed_offline(plan: ProcessPlan, partition: int, storage: CheckpointStorage,
                      batches: Iterable[pa.RecordBatch],
                      base: Optional[Iterable[tuple[bytes, bytes]]] = None) -> Iterator[OfflineRun]:
    """Run ``plan``'s keyed function over ``batches`` (partition ``partition``'s rows, routed) against
    a store at ``storage`` (see the module docstring); yields what it wrote, closes the store on exit.

    ``base``: the entries the store starts from (key order), else it starts empty. The function's
    exceptions propagate (the store is closed, nothing is committed)."""
    assert plan.max_parallelism is not None, "a keyed plan resolves its max parallelism"
    layout = Layout(plan.parallelism, _BATCH)
    store = VersionedStore(storage.child(layout.store_path(partition)), plan.engine)
    try:
        if base is None:
            store.load(_BATCH)
        else:
            store.import_version(1, base)
        ps = PartitionStore(storage.url, partition, layout, store, "new", _BATCH, storage, cached=False)
        counted = _Counted(batches)
        own = owned_key_groups(plan.max_parallelism, plan.parallelism, partition)
        for _ in keyed_loop(plan, LoopTask(_BATCH, partition, storage.url, storage, None), ps, own, iter(counted)):
            pass  # output rows are dropped; the observation row too
        yield OfflineRun(partition, counted.rows, store, storage)
    finally:
        store.close()


class _Counted:
    """The run's input, counting its rows."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches = batches
        self.rows = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            self.rows += batch.num_rows
            yield batch
