"""Flink-style keyed and operator state for PySpark functions, run in-process per partition.

* :func:`keyed_process` runs a :class:`KeyedProcessFunction` with keyed state (value, list,
  map, reducing, aggregating) on a streaming DataFrame; partitions own whole key groups.
  A keyed function handles one row per call (``process_element(row, ctx)``) or, in the
  vectorized form, one key's rows at once (``process_elements(rows, ctx)``; see
  docs/performance-keyed.md).
* :func:`checkpointed_process` runs a non-keyed :class:`CheckpointedFunction` with operator
  state (list = even-split, union list, broadcast).
* Keyed functions have timers (``ctx.timer_service()``, ``on_timer``), event time from
  ``withWatermark``, operator state beside keyed state (``initialize_state``), two inputs
  (:func:`keyed_co_process`) and broadcast rules (:func:`keyed_broadcast_process`). Spark runs
  a batch when their timers are due, also while the sources are idle.
* Their state lives beside the query's checkpoint (``<checkpoint>/spark-state/<name>``) and
  their figures are in the query's progress (``observedMetrics["spark_state.<name>"]["figures"]``).

Modules: :mod:`.api` (driver: the entry points), :mod:`.options` (their shared options, checked
once), :mod:`.plan` (what a task runs: function, options, phases), :mod:`.runner` (task: the
mapInArrow bodies), :mod:`.keyed_loop` (the keyed loop), :mod:`.phases` (its optional phases:
time, operator state, broadcast), :mod:`.keyed_input` (input rows grouped by key),
:mod:`.stores` (versions, store cache, rescale), :mod:`.location` (state
location layout), :mod:`.routing` (key groups -> partitions), :mod:`.inputs` (unioning inputs
by side), :mod:`.ticks` (the tick source: batches for due timers, the checkpoint's place),
:mod:`.observation` (each task's figures, in the query's progress), :mod:`.event_time` (the
watermark declaration in the plan), :mod:`.clock` (a batch's watermark and processing time),
:mod:`.timer_service`, :mod:`.operator_state`,
:mod:`.arrow_io` (rows in, batches out), :mod:`.datetimes` (fast timestamp/date conversion),
:mod:`.gc_pacing` (collector thresholds during a task), :mod:`.keycodec`, :mod:`.functions`
(the user-facing classes and contexts).
"""

from __future__ import annotations

from .api import checkpointed_process, keyed_broadcast_process, keyed_co_process, keyed_process
from .errors import (
    MaxParallelismMismatchError,
    NotInStreamingQueryError,
    OutputSchemaError,
    ProcessDefinitionError,
    StateLocationError,
    StateVersionMissingError,
)
from .functions import (
    BroadcastContext,
    CheckpointedFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedContext,
    KeyedProcessFunction,
    OperatorContext,
    ReadOnlyBroadcastState,
)
from .timer_service import TimeDomain, TimerService
from .operator_state import BroadcastState, OperatorListState

__all__ = [
    "keyed_process", "keyed_co_process", "keyed_broadcast_process", "checkpointed_process",
    "KeyedProcessFunction", "KeyedCoProcessFunction", "KeyedBroadcastProcessFunction", "CheckpointedFunction",
    "BroadcastContext", "ReadOnlyBroadcastState", "TimeDomain", "TimerService",
    "KeyedContext", "OperatorContext", "OperatorListState", "BroadcastState",
    "ProcessDefinitionError", "StateLocationError", "MaxParallelismMismatchError",
    "StateVersionMissingError", "OutputSchemaError", "NotInStreamingQueryError",
]
