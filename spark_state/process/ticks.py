"""Driver side: spark-state's tick source, unioned into the input of every keyed or
checkpointed function.

Spark runs a micro-batch without new input only when one of its own stateful operators asks
for it (``shouldRunAnotherBatch``); a ``mapInArrow`` stage cannot. So every function's input
is unioned with a stream of spark-state's JVM source ``TickSource`` (in the shim jar), which

* tells the tasks where the query's checkpoint is: when Spark creates the stream for a run, on
  the query's thread, it sets the local property :data:`CHECKPOINT_ROOT_PROPERTY` that every
  task of the run reads (:mod:`.location` puts the state beside the checkpoint by default);
* makes Spark run a batch when the function's timers are due: after each batch it reads the
  observation the tasks reported (:mod:`.observation`) from the query's progress and emits one
  *tick* row when an event-time timer is due at the next watermark, or the earliest
  processing-time timer has passed (not under ``availableNow``). Nothing due, no batch.

A function without ``on_timer`` gets a source that never ticks; its rows are filtered out
(``where false``) before the union, so the source only places the checkpoint. Tick rows of a
function with timers reach partition 0 (any partition would do: every batch runs a task in
every partition) and are dropped by the tasks' input reader (side ``TICK``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..spark.jvm import TICK_SOURCE_CLASS
from .errors import ProcessDefinitionError
from .location import CHECKPOINT_ROOT_PROPERTY

__all__ = ["CHECKPOINT_ROOT_PROPERTY", "tick_source_name", "tick_stream", "with_tick_source"]


def tick_source_name(operator_name: str) -> str:
    """The name Spark knows operator ``operator_name``'s tick source by: its table's name, as the
    shim's ``TickTable.name()`` gives it (what the upgrade check finds in a query's plan)."""
    return f"spark_state_ticks({operator_name})"


def tick_stream(df: DataFrame, operator_name: str, *, timers: bool) -> DataFrame:
    """The tick stream of the operator ``operator_name`` reading ``df`` (one ``tick`` column).

    :raises ProcessDefinitionError: the session cannot load spark-state's JVM classes.
    """
    try:
        ticks = (df.sparkSession.readStream.format(TICK_SOURCE_CLASS).option("name", operator_name)
                 .option("timers", "true" if timers else "false").load())
        ticks.columns  # noqa: B018 - analysed now (Spark Connect analyses lazily), so a missing jar fails here
    except Exception as exc:
        if "TickSource" not in str(exc) and "DATA_SOURCE_NOT_FOUND" not in str(exc):
            raise
        raise ProcessDefinitionError(
            "keyed and checkpointed functions need spark-state's JVM classes in the session (the tick source "
            f"{TICK_SOURCE_CLASS}): build the session with spark_state.configure(SparkSession.builder) "
            "(or add the jar of `spark-state jar` to spark.jars)") from None
    return ticks


def without_rows(ticks: DataFrame, like: DataFrame) -> DataFrame:
    """``ticks`` as a stream of ``like``'s columns that never has a row: unioned into ``like``,
    it only brings the tick source into the query (which places the checkpoint)."""
    columns = [F.lit(None).cast(f.dataType).alias(f.name) for f in like.schema.fields]
    return ticks.where(F.lit(False)).select(*columns)


def with_tick_source(df: DataFrame, ticks: DataFrame) -> DataFrame:
    """``df`` unioned with a row-less projection of ``ticks`` (see :func:`without_rows`)."""
    return df.union(without_rows(ticks, df))
