"""What a keyed or checkpointed function's tasks report for each batch, and where it shows.

Every task of a batch ends its output with one *observation row*: the user's columns are
filler (zero values; the row never reaches the user) and the hidden struct column
:data:`OBSERVATION_COLUMN` holds the task's figures (:data:`TASK_FIELDS`, plus
``max_event_ms_<side>`` per input side with event time). Every other output row has that
column null. On the driver, the function's output is::

    mapInArrow(...)  ->  observe("spark_state.<name>", aggregates)  ->  where(column is null)
                     ->  drop(column)

so Spark aggregates the observation rows of each batch (:func:`observed`) and shows the result
in the query's progress: ``query.lastProgress.observedMetrics["spark_state.<name>"]["figures"]``
(and the ``QueryProgressEvent`` of every listener), a struct of :data:`PROGRESS_FIELDS`, whose
meanings docs/keyed-functions.md gives ("In the query's progress").

What spark-state's tick source (the JVM class ``TickSource``, unioned into every function's
input) reads after each batch to decide whether Spark must run a batch for timers:
``next_processing_timer_ms``, and for event time, when ``spark_time`` is true,
``next_event_timer_ms`` against Spark's own watermark of the next batch (the commit log's),
else ``event_timers_due``. ``next_watermark_ms`` is :func:`.clock.compute`'s rule written as
Spark aggregates, ``max(W, min over sides that saw rows of (max event time - delay))``: Spark's
next watermark too, unless Spark's watermark follows other rows than the function's (a filter
after ``withWatermark``, several watermarks in one query).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (BooleanType, DoubleType, LongType, StructField, StructType)

from ..spark.compat import arrow_schema

#: The hidden output column of observation rows.
OBSERVATION_COLUMN = "__spark_state_observation"
#: The observation's name in the query progress is this prefix plus the operator's name.
OBSERVATION_PREFIX = "spark_state."

#: The fields every task reports (the struct also has ``max_event_ms_<side>`` per event-time side).
TASK_FIELDS: tuple[tuple[str, Any], ...] = (
    ("batch", LongType()),
    ("rows_total", LongType()),
    ("rows_updated", LongType()),
    ("state_bytes", LongType()),
    ("checkpoint_bytes_written", LongType()),
    ("commit_ms", DoubleType()),
    ("load_ms", DoubleType()),
    ("load_files_fetched", LongType()),
    ("load_bytes_fetched", LongType()),
    ("changelog_bytes_replayed", LongType()),
    ("timers_fired", LongType()),
    ("late_rows_dropped", LongType()),
    ("watermark_ms", LongType()),
    ("next_event_timer_ms", LongType()),
    ("next_processing_timer_ms", LongType()),
    ("spark_time", BooleanType()),
)

#: The fields of the observation in the query progress, in order.
PROGRESS_FIELDS = ("batch", "tasks", "rows_total", "rows_updated", "state_bytes", "checkpoint_bytes_written",
                   "commit_ms", "load_ms", "load_files_fetched", "load_bytes_fetched", "changelog_bytes_replayed",
                   "timers_fired", "late_rows_dropped", "watermark_ms", "next_watermark_ms", "next_event_timer_ms",
                   "next_processing_timer_ms", "event_timers_due", "spark_time")


def observation_name(operator_name: str) -> str:
    return OBSERVATION_PREFIX + operator_name


def max_event_field(side: str) -> str:
    return f"max_event_ms_{side}"


def task_struct(event_sides: Mapping[str, int]) -> StructType:
    """The observation column's type for a plan whose event-time sides are ``event_sides``
    (side tag -> watermark delay ms)."""
    fields = [StructField(n, t, True) for n, t in TASK_FIELDS]
    fields += [StructField(max_event_field(s), LongType(), True) for s in sorted(event_sides)]
    return StructType(fields)


def with_observation(output_schema: StructType, event_sides: Mapping[str, int]) -> StructType:
    """The ``mapInArrow`` schema: the user's columns plus the observation column."""
    return StructType(list(output_schema.fields) + [StructField(OBSERVATION_COLUMN, task_struct(event_sides), True)])


#: How each task figure combines over the batch's tasks: summed, the highest or the lowest (``tasks`` is a count).
_COMBINE = {"batch": "max", "rows_total": "sum", "rows_updated": "sum", "state_bytes": "sum",
            "checkpoint_bytes_written": "sum", "commit_ms": "sum", "load_ms": "max", "load_files_fetched": "sum",
            "load_bytes_fetched": "sum", "changelog_bytes_replayed": "sum", "timers_fired": "sum",
            "late_rows_dropped": "sum", "watermark_ms": "max", "next_event_timer_ms": "min",
            "next_processing_timer_ms": "min", "spark_time": "min"}
#: The single column of the observation in the query's progress: a struct of PROGRESS_FIELDS.
FIGURES = "figures"


def observed(out: DataFrame, operator_name: str, event_sides: Mapping[str, int]) -> DataFrame:
    """The function's output ``out`` (with the observation column) observed under
    ``spark_state.<operator_name>`` and without observation rows or column.

    Every output row passes the observation, and Spark gives each aggregate occurrence of an
    observation its own buffer, updated per row: so there is ONE aggregate, ``collect_list`` of
    the column (a null is skipped in a few nanoseconds), and the figures are one expression over
    that list of the tasks' rows (a fold, evaluated once per batch), in one struct column
    :data:`FIGURES`. (Fourteen aggregates over the struct's fields cost a keyed function with
    timers a fifth of its throughput in ``bench/keyed_bench.py``'s ``count_timer``.)"""
    o = F.col(OBSERVATION_COLUMN)
    sides = sorted(event_sides)
    folded = list(_COMBINE) + [max_event_field(side) for side in sides]
    types = {n: t for n, t in TASK_FIELDS}

    def zero() -> Column:
        return F.struct(F.lit(0).cast("long").alias("tasks"),
                        *[F.lit(None).cast(types.get(n, LongType())).alias(n) for n in folded])

    def combine(acc: Column, row: Column) -> Column:
        def one(name: str) -> Column:
            a, x = acc.getField(name), row.getField(name)
            how = _COMBINE.get(name, "max")
            if how == "sum":
                return F.when(x.isNull(), a).when(a.isNull(), x).otherwise(a + x).alias(name)
            return (F.greatest(a, x) if how == "max" else F.least(a, x)).alias(name)  # both skip nulls

        return F.struct((acc.getField("tasks") + 1).alias("tasks"), *[one(n) for n in folded])

    def finish(acc: Column) -> Column:
        watermark = acc.getField("watermark_ms")
        candidates = [acc.getField(max_event_field(s)) - F.lit(event_sides[s]) for s in sides]
        if candidates:
            # greatest/least skip nulls: sides that saw no rows yet do not hold the watermark back
            next_watermark = F.greatest(watermark, F.least(*candidates) if len(candidates) > 1 else candidates[0])
        else:
            next_watermark = F.lit(None).cast("long")
        next_event = acc.getField("next_event_timer_ms")
        due = F.coalesce((next_event <= next_watermark) & (next_watermark > watermark), F.lit(False))
        derived = {"next_watermark_ms": next_watermark, "event_timers_due": due.cast(BooleanType())}
        return F.struct(*[(derived[n] if n in derived else acc.getField(n)).alias(n) for n in PROGRESS_FIELDS])

    figures = F.aggregate(F.collect_list(o), zero(), combine, finish)
    return out.observe(observation_name(operator_name), figures.alias(FIGURES)).where(o.isNull()).drop(
        OBSERVATION_COLUMN)


class ObservationWriter:
    """Task side: the one observation row of a task, as a record batch of the ``mapInArrow``
    schema (filler in the user's columns)."""

    def __init__(self, output_schema: StructType, event_sides: Mapping[str, int]) -> None:
        self._struct = task_struct(event_sides)
        self._schema = arrow_schema(with_observation(output_schema, event_sides))

    def batch(self, values: Mapping[str, Optional[float]]) -> pa.RecordBatch:
        arrow = self._schema
        columns = [_filler(field) for field in list(arrow)[:-1]]
        row = {f.name: values.get(f.name) for f in self._struct.fields}
        columns.append(pa.array([row], type=arrow.field(len(arrow) - 1).type))
        return pa.RecordBatch.from_arrays(columns, schema=arrow)


def _filler(field: pa.Field) -> pa.Array:
    """One value of ``field``'s type: null where the field is nullable, else a zero value
    (Spark's Arrow reader refuses nulls in columns declared not null)."""
    if field.nullable:
        return pa.nulls(1, type=field.type)
    return pa.array([_zero(field.type)], type=field.type)


def _zero(t: pa.DataType) -> Any:
    if pa.types.is_struct(t):
        return {t.field(i).name: (None if t.field(i).nullable else _zero(t.field(i).type)) for i in range(t.num_fields)}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return []
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return b""
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_decimal(t):
        import decimal
        return decimal.Decimal(0)
    if pa.types.is_floating(t):
        return 0.0
    if pa.types.is_integer(t):
        return 0
    return pa.scalar(0, pa.int64()).cast(t).as_py()  # dates, timestamps, durations
